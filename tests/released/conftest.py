"""The server fixtures of tests/engine/server, for the released build's smoke tests."""

from tests.engine.server.conftest import duet_home, server_factory  # noqa: F401
