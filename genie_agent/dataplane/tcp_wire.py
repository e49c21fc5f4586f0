"""What the TCP data plane puts on the wire: the handshake, frame headers, parts, streams.

Connections. For a job, the lower global rank of each pair that talks connects ``streams`` TCP
connections to the higher rank's agent and introduces each with a handshake (``HANDSHAKE``:
magic, 16-byte job token, src rank, dst rank, stream index, stream count).

Channels. The streams of a rank pair fall into ``DataOptions.channels`` equal sets; a program
sends on its channel's set (``program_channels``), as NCCL gives each communicator connections of
its own, so one process group's bytes never wait behind another's in one TCP byte stream.
Receivers read every stream: frames name their program.

NCCL-style programs (``genie.collectives.nccl_wire``) cut a program's set once more, into the
program's channels: a step goes on the streams of its channel (one each when the set has as
many streams as the program has channels), as NCCL gives each channel its own connection.

Frames. A message (one SEND step) is cut into parts (``split_parts``: one per stream when it is
large enough), each sent as a 48-byte header (``HDR``: program, iteration, src, dst, tag, seq,
part, nparts, offset, length, crc32) followed by its bytes, straight from the rank's buffer with
``sendmsg`` of memoryviews (``OutFrame``). Under the LL and LL128 protocols a part's flag bytes
(``nccl_wire.wire_bytes`` less its length) come between its header and its bytes: both sides know
how many from the program, the length and CRC are the data's. A ``Stream`` is one connection
with its send queue and the receive state of the frame it is reading.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# source ports per flow and parts per message: rules the controller and the model share
from genie.collectives.connections import source_ports as source_ports
from genie.collectives.connections import split_parts as split_parts
from genie.wire.messages import DataOptions
from genie_agent.dataplane.tcp_state import set_congestion

if TYPE_CHECKING:
    from genie_agent.dataplane.tcp_engine import ProgRun

    StepKey = tuple[ProgRun, int]  # a step of a run: (its run state, its index)

HANDSHAKE = struct.Struct("<4s16sIIHH")
HANDSHAKE_MAGIC = b"GNI1"
HDR = struct.Struct("<IIIIiIHHQQI")  # prog iter src dst tag seq part nparts off len crc
LINGER_ABORT = struct.pack("ii", 1, 0)  # close with a reset: no TIME_WAIT holds a fixed port


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
    flags: int = 0  # framing bytes of the current part still to read (LL / LL128 protocols)
