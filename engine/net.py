"""Addresses: what counts as this machine only (the server and the RPC worker bind there unless
told otherwise)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True when ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
