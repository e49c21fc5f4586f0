"""Intra-host steps as a model: ranks of one agent exchange in memory and take the modelled time.

Ranks placed on one host talk over NVLink/NVSwitch-class links that a TCP socket through the
host's Python cannot stand for (a 256 KiB step is microseconds on NVLink, milliseconds through
the loopback). So, with ``DataOptions.intra == "model"``, a step between two ranks of this agent
never touches a socket: the sending rank's engine prices it on its own intra-host port, as the
cost model does (``out = max(now, port free) + bytes / intra_bandwidth``, the port then busy
until ``out``; the bytes arrive ``intra_latency`` later), and hands the receiving rank's engine
a ``LocalFrame`` (the header a TCP frame would carry, and a view of the sender's buffer) through
its ``Mailbox``. The receiver matches it as it would a TCP frame (parking it when it belongs to a
later iteration), copies the bytes into the RECV's scratch and acknowledges; the RECV completes
at the modelled arrival, the SEND once its bytes are out and the receiver has taken them (so the
sender's buffer is never reused under a pending copy, and a sender runs at most one iteration
ahead). Times below the host's own copy and wake-up cost (tens of microseconds) cannot be met;
they come out that much late.

Nothing here opens a socket: a mailbox wakes its engine's selector through a pipe.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from dataclasses import dataclass, field


@dataclass(eq=False)
class LocalFrame:
    """A step's bytes from one rank of this agent to another (or, with ``ack``, its receipt)."""

    header: tuple  # as HDR would carry it: prog iter src dst tag seq part nparts off len crc
    payload: memoryview | None  # the sender's bytes (None for an ack)
    arrive_ns: int  # when the modelled transfer lands at the receiver
    src: int  # sending rank
    key: tuple  # the sender's (ProgRun, step index)
    ack: bool = False


@dataclass(eq=False)
class LocalPort:
    """The receiving side of one co-located peer (``match`` sees it as it sees a TCP stream)."""

    peer: int
    parked: tuple | None = None


class Mailbox:
    """A rank engine's inbox of local frames, with a pipe its selector watches for wake-ups."""

    def __init__(self) -> None:
        self.items: deque[LocalFrame] = deque()
        self.rfd, self.wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def fileno(self) -> int:
        """The read end of the wake-up pipe (what the selector watches)."""
        return self.rfd

    def put(self, item: LocalFrame) -> None:
        """Queue ``item`` (from any thread) and wake the owner."""
        self.items.append(item)
        with contextlib.suppress(BlockingIOError, OSError):  # full pipe: a wake-up is pending
            os.write(self.wfd, b"!")

    def take(self) -> list[LocalFrame]:
        """Everything queued so far (owner's thread), the wake-ups cleared first."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.rfd, 4096):
                pass
        out = []
        while self.items:
            out.append(self.items.popleft())
        return out

    def close(self) -> None:
        """Close the pipe."""
        for fd in (self.rfd, self.wfd):
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class LocalHub:
    """The mailboxes of every rank of this agent whose intra-host steps are modelled."""

    boxes: dict[int, Mailbox] = field(default_factory=dict)

    def box(self, rank: int) -> Mailbox:
        """The mailbox of ``rank`` (made on first use)."""
        b = self.boxes.get(rank)
        if b is None:
            b = self.boxes[rank] = Mailbox()
        return b

    def post(self, rank: int, item: LocalFrame) -> None:
        """Deliver ``item`` to ``rank``'s mailbox."""
        self.boxes[rank].put(item)

    def close(self) -> None:
        """Close every mailbox."""
        for b in self.boxes.values():
            b.close()
        self.boxes.clear()


def transfer_ns(nbytes: int, bandwidth: float) -> int:
    """Nanoseconds ``nbytes`` occupy an intra-host port of ``bandwidth`` bytes/s."""
    return round(nbytes / bandwidth * 1e9)
