"""Liveness rules both sides of the control channel follow."""

from __future__ import annotations

HEARTBEAT_INTERVAL_S = 0.5  # both sides beat this often
MISSED_BEATS_LIMIT = 3  # a peer silent for this many intervals is lost
# what ``--missed-beats`` and a testbed's ``missed_beats`` may set: at least two beats (one late
# beat is not a loss), at most what a person waits for a lost peer to be named (1000 x 0.5 s)
MISSED_BEATS_MIN, MISSED_BEATS_MAX = 2, 1000
