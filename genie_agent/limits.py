"""What a control message may ask of this agent: checks of its numbers before any work is done.

Pure and cheap (no program is built here): a Prepare's data-plane options must be in range
(a socket buffer of a TiB, a NaN timeout or a non-hex token are refused with one line instead of
killing the prepare thread), and the work of building its programs is bounded before it starts:
every algorithm emits at most ``max_steps_per_rank`` steps per rank (chunks x steps per chunk),
so the sum over programs of that bound times this agent's ranks in each bounds the build.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Sequence

from genie.collectives.program import Program
from genie.collectives.registry import max_steps_per_rank
from genie.errors import ProtocolError
from genie.wire.messages import DataOptions, Limits

SOCKET_BUFFER_MAX = 1 << 30  # SO_SNDBUF/SO_RCVBUF: the kernel clamps far below this anyway
CONNECT_TIMEOUT_MAX_S = 600.0
INTRA_BW_RANGE = (1e3, 1e15)  # bytes/s: 1 kB/s .. 1 PB/s
INTRA_LAT_MAX_S = 1.0
_TOKEN = re.compile(r"^([0-9a-f]{32})?$")
_CONGESTION = re.compile(r"^[a-z0-9_]{1,15}(,[a-z0-9_]{1,15}){0,3}$")


def check_options(opts: DataOptions, limits: Limits) -> None:
    """Refuse data-plane options out of range (ProtocolError, one line)."""
    if opts.transport not in ("tcp", "rdma"):
        raise ProtocolError(f"transport {opts.transport!r}; use tcp or rdma")
    if not 1 <= opts.streams <= limits.max_streams:
        raise ProtocolError(f"{opts.streams} streams; limit {limits.max_streams}")
    if not 1 <= opts.channels <= opts.streams or opts.streams % opts.channels:
        raise ProtocolError(f"{opts.channels} channels do not divide {opts.streams} streams")
    if len(opts.program_channels) > limits.max_programs:
        raise ProtocolError(
            f"{len(opts.program_channels)} program channels; limit {limits.max_programs}"
        )
    if any(not 0 <= c < opts.channels for c in opts.program_channels):
        raise ProtocolError(f"a program channel outside 0..{opts.channels - 1}")
    for name in ("sndbuf", "rcvbuf"):
        value = getattr(opts, name)
        if not 0 <= value <= SOCKET_BUFFER_MAX:
            raise ProtocolError(f"{name} {value} bytes outside 0..{SOCKET_BUFFER_MAX}")
    if not 1 <= opts.min_part <= limits.max_rank_bytes:
        raise ProtocolError(f"min_part {opts.min_part} bytes outside 1..{limits.max_rank_bytes}")
    t = opts.connect_timeout_s
    if not (math.isfinite(t) and 0 < t <= CONNECT_TIMEOUT_MAX_S):
        raise ProtocolError(f"connect timeout {t} s outside (0, {CONNECT_TIMEOUT_MAX_S:g}]")
    if not _TOKEN.match(opts.token):
        raise ProtocolError("job token must be 32 lowercase hex digits")
    if opts.congestion and not _CONGESTION.match(opts.congestion):
        raise ProtocolError(f"congestion control {opts.congestion[:40]!r} is not a name list")
    if opts.payload not in ("real", "lean"):
        raise ProtocolError(f"payload {opts.payload!r}; use real or lean")
    if opts.intra not in ("model", "wire"):
        raise ProtocolError(f"intra {opts.intra!r}; use model or wire")
    bw, lat = opts.intra_bandwidth, opts.intra_latency
    lo, hi = INTRA_BW_RANGE
    if not (isinstance(bw, int | float) and math.isfinite(bw) and lo <= bw <= hi):
        raise ProtocolError(f"intra-host bandwidth {bw} B/s outside {lo:g}..{hi:g}")
    if not (isinstance(lat, int | float) and math.isfinite(lat) and 0 <= lat <= INTRA_LAT_MAX_S):
        raise ProtocolError(f"intra-host latency {lat} s outside 0..{INTRA_LAT_MAX_S:g}")
    if len(opts.rank_addrs) > limits.max_ranks:
        raise ProtocolError(f"{len(opts.rank_addrs)} rank addresses; limit {limits.max_ranks}")
    for a in set(opts.rank_addrs):
        if a:
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise ProtocolError(f"rank address {a[:64]!r} is not an IP address") from None


def build_steps(agent: str, programs: Sequence[Program], placement: Sequence[str]) -> int:
    """Upper bound of the steps this agent builds for ``programs`` (never builds them)."""
    mine = {r for r, a in enumerate(placement) if a == agent}
    total = 0
    for prog in programs:
        sp = prog.spec
        if sp.ranks:
            local = sum(1 for r in sp.ranks if r in mine)
        else:
            local = sum(1 for r in mine if r < sp.n_ranks)
        total += max_steps_per_rank(sp) * local
    return total


def check_programs(programs: Sequence[Program], placement: Sequence[str], limits: Limits) -> None:
    """Refuse programs whose counts or sizes pass ``limits`` (from their specs alone)."""
    if len(programs) > limits.max_programs:
        raise ProtocolError(f"{len(programs)} programs; limit {limits.max_programs}")
    if len(placement) > limits.max_ranks:
        raise ProtocolError(f"{len(placement)} ranks; limit {limits.max_ranks}")
    for prog in programs:
        sp = prog.spec
        if sp.n_ranks > len(placement):
            raise ProtocolError(f"{prog!r} has more ranks than the placement ({len(placement)})")
        if sp.n_ranks < 1 or sp.size < 0 or not 1 <= sp.chunks <= limits.max_chunks:
            raise ProtocolError(f"{prog!r}: ranks, size or chunks out of bounds")
        if max_steps_per_rank(sp) > limits.max_steps:
            raise ProtocolError(
                f"{prog!r}: up to {max_steps_per_rank(sp)} steps per rank; "
                f"limit {limits.max_steps} (use fewer chunks or ranks)"
            )
        if sp.size > limits.max_rank_bytes:
            raise ProtocolError(f"{prog!r}: size {sp.size} beyond limit {limits.max_rank_bytes}")
        for g in sp.ranks:
            if not 0 <= g < len(placement):
                raise ProtocolError(f"{prog!r} names rank {g}, not placed")


def check_build_cost(
    agent: str, programs: Sequence[Program], placement: Sequence[str], limits: Limits
) -> int:
    """Refuse a job whose programs would take too long to build here; return its step bound."""
    check_programs(programs, placement, limits)
    steps = build_steps(agent, programs, placement)
    if steps > limits.max_build_steps:
        raise ProtocolError(
            f"job needs up to {steps} steps built on {agent} (chunks x steps per chunk x local "
            f"ranks); limit {limits.max_build_steps} (use fewer chunks or ranks)"
        )
    return steps
