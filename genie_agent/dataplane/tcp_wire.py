"""What the TCP data plane puts on the wire: the handshake, frame headers, parts, streams.

Connections. For a job, the lower global rank of each pair that talks connects ``streams`` TCP
connections to the higher rank's agent and introduces each with a handshake (``HANDSHAKE``:
magic, 16-byte job token, src rank, dst rank, stream index, stream count).

Channels. The streams of a rank pair fall into ``DataOptions.channels`` equal sets; a program
sends on its channel's set (``program_channels``), as NCCL gives each communicator connections of
its own, so one process group's bytes never wait behind another's in one TCP byte stream.
Receivers read every stream: frames name their program.

Frames. A message (one SEND step) is cut into parts (``split_parts``: one per stream when it is
large enough), each sent as a 48-byte header (``HDR``: program, iteration, src, dst, tag, seq,
part, nparts, offset, length, crc32) followed by its bytes, straight from the rank's buffer with
``sendmsg`` of memoryviews (``OutFrame``). A ``Stream`` is one connection with its send queue
and the receive state of the frame it is reading.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from genie.collectives.topology import flow_hash
from genie.wire.messages import DataOptions
from genie_agent.dataplane.tcp_state import set_congestion

if TYPE_CHECKING:
    from genie_agent.dataplane.tcp_engine import ProgRun

    StepKey = tuple[ProgRun, int]  # a step of a run: (its run state, its index)

HANDSHAKE = struct.Struct("<4s16sIIHH")
HANDSHAKE_MAGIC = b"GNI1"
HDR = struct.Struct("<IIIIiIHHQQI")  # prog iter src dst tag seq part nparts off len crc
# Source ports of data connections: fixed per flow, so a fabric that hashes the 5-tuple (ECMP)
# puts a job's flows on the same paths every run. 20000..32767 lies below Linux's ephemeral
# range (32768..60999), where the listeners' and other programs' ports come from.
SOURCE_PORT_BASE = 20000
SOURCE_PORT_SPAN = 12768
SOURCE_PORT_TRIES = 16  # then the kernel picks one
LINGER_ABORT = struct.pack("ii", 1, 0)  # close with a reset: no TIME_WAIT holds a fixed port


def source_ports(src: int, dst: int, stream: int) -> Iterator[int]:
    """The source ports connection ``stream`` of rank pair (src, dst) tries, in order."""
    first = flow_hash(src, dst, stream) % SOURCE_PORT_SPAN
    for j in range(SOURCE_PORT_TRIES):
        yield SOURCE_PORT_BASE + (first + j) % SOURCE_PORT_SPAN


def split_parts(nbytes: int, streams: int, min_part: int) -> list[tuple[int, int]]:
    """Cut a message into (offset, length) parts, one per stream, each at least ``min_part``."""
    k = max(1, min(streams, nbytes // max(1, min_part)))
    base, extra = divmod(nbytes, k)
    parts, off = [], 0
    for i in range(k):
        ln = base + (1 if i < extra else 0)
        parts.append((off, ln))
        off += ln
    return parts


def tune(sock: socket.socket, opts: DataOptions) -> None:
    """Set TCP_NODELAY, the job's congestion control and socket buffer sizes on a data
    connection (a congestion control the kernel refuses is a TransportError line)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if opts.congestion:
        set_congestion(sock, opts.congestion)
    if opts.sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, opts.sndbuf)
    if opts.rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, opts.rcvbuf)


class OutFrame:
    """A frame being sent: remaining pieces (header, payload) and the step it belongs to."""

    __slots__ = ("pieces", "step")

    def __init__(self, pieces: list[memoryview], step: StepKey) -> None:
        self.pieces = pieces
        self.step = step

    def advance(self, n: int) -> bool:
        """Drop ``n`` sent bytes; True when the frame is fully sent."""
        while n and self.pieces:
            head = self.pieces[0]
            if n >= len(head):
                n -= len(head)
                self.pieces.pop(0)
            else:
                self.pieces[0] = head[n:]
                n = 0
        while self.pieces and len(self.pieces[0]) == 0:
            self.pieces.pop(0)
        return not self.pieces


@dataclass(eq=False)
class Stream:
    """One TCP connection of a rank to a peer, with its send queue and receive state."""

    sock: socket.socket
    peer: int
    index: int
    out: deque[OutFrame] = field(default_factory=deque)
    hdr: bytearray = field(default_factory=lambda: bytearray(HDR.size))
    hdr_got: int = 0
    # the part being received: (step, where it lands or None for a lean sink, bytes in, length,
    # the sender's CRC, the CRC of a lean part's sample so far)
    cur: tuple[StepKey, memoryview | None, int, int, int, int] | None = None
    parked: tuple | None = None  # header of a frame of a later iteration
    mask: int = 0
