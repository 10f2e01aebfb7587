"""Nothing sent is lost when the process ends during a reply: a real window in its own process,
ended by a real SIGKILL (no chance to save: the checkpoint written at send time, and the ones
written while the reply streams, are what is on disk) or SIGTERM (the reply so far is written
first, through the signal's wake-up descriptor). After each: the message is in the file, the
file opens and passes its checksums. The same for ``duet-cli generate --session`` (it writes the
message before the reply, and the reply every 2 s; SIGTERM stops the reply and saves it).
scripts/kill_soak.py runs many more, with the same helpers (tests/app/killing.py)."""

from __future__ import annotations

import signal

import pytest

from engine.errors import SIGPIPE
from tests.app.killing import MESSAGE, end, saved, start_cli, start_window, stderr_of, window_file
from tests.conftest import REPLY_WAIT_S


@pytest.mark.parametrize("run", range(3))
def test_sigkill_during_a_reply_loses_no_sent_message(tmp_path, smol_path, run):
    end(start_window(tmp_path, smol_path), signal.SIGKILL)
    assert MESSAGE in saved(window_file(tmp_path))


@pytest.mark.parametrize("run", range(2))
def test_sigterm_during_a_reply_writes_the_reply_so_far(tmp_path, smol_path, run):
    assert end(start_window(tmp_path, smol_path), signal.SIGTERM) == 0
    texts = saved(window_file(tmp_path))
    assert MESSAGE in texts[:-1] and texts[-1]  # the partial reply follows it


def test_sigkill_during_a_command_line_reply_loses_no_sent_message(tmp_path, smol_path):
    session = tmp_path / "chat.duet"
    end(start_cli(tmp_path, smol_path, session), signal.SIGKILL)
    assert MESSAGE in saved(session)


def test_sigterm_during_a_command_line_reply_saves_the_reply_so_far(tmp_path, smol_path):
    session = tmp_path / "chat.duet"
    assert end(start_cli(tmp_path, smol_path, session), signal.SIGTERM) == 128 + signal.SIGTERM
    texts = saved(session)
    assert MESSAGE in texts[:-1] and texts[-1]


def test_a_command_line_reply_whose_reader_goes_away_is_saved_without_a_traceback(tmp_path,
                                                                                   smol_path):
    session = tmp_path / "chat.duet"
    proc = start_cli(tmp_path, smol_path, session)
    proc.stdout.close()  # `duet-cli generate ... | head -c 1`: the pipe's reader is gone
    assert proc.wait(timeout=REPLY_WAIT_S) == 128 + SIGPIPE
    texts = saved(session)
    assert MESSAGE in texts[:-1] and texts[-1]
    assert "Traceback" not in stderr_of(tmp_path) and "went away" in stderr_of(tmp_path)
