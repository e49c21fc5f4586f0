"""The agent's log, safe against floods: one clean line per event, rate-limited per kind.

Anyone who reaches an agent's ports can make it refuse things as fast as they can send; each
refusal is worth a line, but 100,000 of them are not. ``LogBook`` writes a line only while its
kind (the text before the first ``:``, e.g. ``malformed`` or ``data``) has tokens left: a burst of
``burst`` lines, then ``rate`` lines per second; what it holds back it counts, and says so in one
line when the kind may speak again. Lines are cut to ``MAX_LINE`` characters and every control
character (a newline or an escape sequence sent by a peer) is shown escaped, so a line is a line.
Kinds beyond ``MAX_KINDS`` share one bucket: the state is bounded whatever peers send.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MAX_LINE = 400
MAX_KINDS = 64
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}


def clean(line: str) -> str:
    """One printable line: control characters escaped, at most ``MAX_LINE`` characters."""
    text = line.translate(_CONTROL)
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


class LogBook:
    """A rate-limited, sanitising front of a line writer (thread-safe)."""

    def __init__(
        self,
        write: Callable[[str], None],
        burst: int = 20,
        rate: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write
        self.burst = burst
        self.rate = rate
        self.clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, float] = {}
        self._stamp: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.written = 0
        self.suppressed = 0

    def _kind(self, line: str) -> str:
        kind = line.split(":", 1)[0][:32] if ":" in line else "other"
        if kind not in self._tokens and len(self._tokens) >= MAX_KINDS:
            return "other"
        return kind

    def __call__(self, line: str) -> None:
        """Write ``line`` if its kind has a token; else count it as held back."""
        line = clean(line)
        now = self.clock()
        with self._lock:
            kind = self._kind(line)
            tokens = self._tokens.get(kind, float(self.burst))
            tokens = min(float(self.burst), tokens + (now - self._stamp.get(kind, now)) * self.rate)
            self._stamp[kind] = now
            if tokens < 1.0:
                self._tokens[kind] = tokens
                self._held[kind] = self._held.get(kind, 0) + 1
                self.suppressed += 1
                return
            self._tokens[kind] = tokens - 1.0
            held = self._held.pop(kind, 0)
            self.written += 1 + bool(held)
        if held:
            self.write(f"{kind}: {held} similar lines held back (more than {self.rate:g}/s)")
        self.write(line)

    def tick(self) -> None:
        """Report held-back counts of kinds that may speak again (call now and then)."""
        now = self.clock()
        ready = []
        with self._lock:
            for kind in list(self._held):
                since = now - self._stamp.get(kind, now)
                tokens = self._tokens.get(kind, 0.0) + since * self.rate
                if tokens >= 1.0:
                    self._tokens[kind] = min(float(self.burst), tokens) - 1.0
                    self._stamp[kind] = now
                    ready.append((kind, self._held.pop(kind)))
        for kind, n in ready:
            self.write(f"{kind}: {n} similar lines held back (more than {self.rate:g}/s)")

    def flush(self) -> None:
        """Say how many lines of each kind are still held back (e.g. before stopping)."""
        with self._lock:
            held, self._held = self._held, {}
        for kind, n in sorted(held.items()):
            self.write(f"{kind}: {n} similar lines held back (more than {self.rate:g}/s)")
