"""Liveness rules both sides of the control channel follow."""

from __future__ import annotations

HEARTBEAT_INTERVAL_S = 0.5  # both sides beat this often
MISSED_BEATS_LIMIT = 3  # a peer silent for this many intervals is lost
