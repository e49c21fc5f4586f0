"""Job tokens: the secret a controller hands every agent of a job for its data connections.

A data-plane handshake carries the job's token; an agent accepts a peer's connection only with
the token of a job it holds (or is about to hold). Tokens are random, 16 bytes, shown as hex.
"""

from __future__ import annotations

import os


def token_bytes(token: str) -> bytes:
    """The 16 bytes a job token (hex string) puts in handshakes."""
    raw = bytes.fromhex(token) if token else b""
    return (raw + bytes(16))[:16]


def new_token() -> str:
    """A fresh random job token (hex)."""
    return os.urandom(16).hex()
