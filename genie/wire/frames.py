"""The one size limit of a control frame, checked where a frame is made and where one arrives.

Both ends check it three times: ``messages.encode`` refuses to make a larger frame (so nothing
oversized is ever sent), and each receive path (the controller's channel, the agent's daemon)
refuses a larger frame before copying or decoding it, with libzmq's MAXMSGSIZE (``sockets``) as
the first guard. ``messages.decode`` checks it once more for frames that come from elsewhere.

Why 16 MiB: it bounds what one frame can make an agent hold (a frame of small integers decodes
to several times its size in Python objects), and it is four times the largest frame the
agent's admission checks let through in ordinary use. Measured with ``encode``: a Prepare at
every limit of ``messages.Limits`` (256 programs of 4,096 explicitly listed ranks, 4,096
agents with IPv6 data endpoints and per-rank NIC addresses) is 3.3 MiB; a Go with 256 ops for
each of 4,096 ranks on one agent is 12.5 MiB; a Result of 8 ranks x 100,000 iterations (the
``max_iters`` limit) is 13.7 MiB, and its NIC and stack counters (``genie.wire.counters``:
at most 16 sources x 256 names, names <= 64 characters, values 0..2^63-1, plus per source 32
samples of 32 names) add at most 1.5 MiB (0.3 MiB without samples): 15.2 MiB together. A
Prepare's RDMA options are a few numbers, each bounded where the agent takes them (queue pairs
per connection 1..16, traffic class 0..255, stall bound 0..86400 s, window 1..4096, segment
4 KiB..1 GiB), and a device name per agent and per rank (0.1 MiB at 4,096 of each with
names like ``mlx5_0``). What does not fit is refused with a FrameTooLarge naming the
size: an all-to-all-v's byte matrix grows with the square of its ranks (5 MiB at 1,024 ranks,
20 MiB at 2,048), and per-step times of long runs (``record_steps``) grow with steps x
iterations.
"""

from __future__ import annotations

from genie.errors import FrameTooLarge

MAX_FRAME_BYTES = 16 << 20
# CURVE wraps each frame in a MESSAGE command (8 bytes of name, an 8-byte nonce, a 16-byte MAC
# and a flags byte), and libzmq's MAXMSGSIZE counts those wrapped bytes: a frame at the limit
# must pass it. The exact limit is then checked on the frame itself.
CURVE_OVERHEAD = 33
SOCKET_MAX_MSG = MAX_FRAME_BYTES + 64  # libzmq's MAXMSGSIZE on both ends (>= CURVE_OVERHEAD)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def check_frame(size: int, what: str = "control frame") -> None:
    """Refuse (FrameTooLarge) a frame of ``size`` bytes beyond ``MAX_FRAME_BYTES``."""
    if size > MAX_FRAME_BYTES:
        raise FrameTooLarge(
            f"{what} of {size} bytes ({_mib(size)}) exceeds the control channel's limit of "
            f"{MAX_FRAME_BYTES} bytes ({_mib(MAX_FRAME_BYTES)})",
            size=size,
            limit=MAX_FRAME_BYTES,
        )
