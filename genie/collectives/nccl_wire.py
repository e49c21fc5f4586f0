"""NCCL-style ring collectives on genie's wire: channels, chunks of the protocol's size, framing.

NCCL does not put a ring collective on the network as one message per rank pair and ring step.
It splits the buffer over C *channels* (each with a connection of its own per peer: a socket,
or a QP on RDMA), runs the ring on each channel's part in *loops* of n chunks of the protocol's
chunk size, cuts each chunk into *slices* (one network send each), and its LL and LL128
protocols carry flag bytes beside the data. A ring program in this style
(``build_program(..., style=NcclStyle(...))``, algorithm ``ring``) is genie's ring run once per
*piece*: piece = (channel, loop, slice), its n shards the slice of each of the loop's n chunks.
Pieces of one channel pipeline one behind the other (``genie.collectives.emit.merge``), pieces
of different channels do not wait for each other, and every step's ``chunk`` is its piece, whose
channel (``piece_channels``) picks the connection its bytes take on the agents and in the model.

NCCL's constants (NVIDIA/nccl 2.30.7, commit 5067397c; facts, not code):

* ``src/include/device.h``: ``NCCL_STEPS`` 8 FIFO steps; LL lines ``union ncclLLFifoLine`` of
  16 bytes (data1, flag1, data2, flag2: 8 data bytes); ``NCCL_LL_LINES_PER_THREAD`` 8,
  ``NCCL_LL_MAX_NTHREADS`` 512; LL128 lines of ``NCCL_LL128_LINESIZE`` 128 bytes, 15 of their 16
  ``uint64_t`` data (120 bytes), ``NCCL_LL128_ELEMS_PER_THREAD`` 120, ``NCCL_LL128_MAX_NTHREADS``
  640; ``ncclProtoGrainSize``: LL 16, LL128 1920, Simple 512 bytes.
* ``src/init.cc``: buffer sizes ``DEFAULT_LL_BUFFSIZE`` 8 x 512 x 8 x 16 = 512 KiB,
  ``DEFAULT_LL128_BUFFSIZE`` 120 x 640 x 8 x 8 = 4,915,200 B, ``DEFAULT_BUFFSIZE`` 4 MiB
  (``NCCL_LL_BUFFSIZE``, ``NCCL_LL128_BUFFSIZE``, ``NCCL_BUFFSIZE`` override them).
* ``src/include/collectives.h``: ring all-reduce / all-gather / reduce-scatter
  ``CHUNKSTEPS`` = ``NCCL_STEPS / 2`` = 4 and ``SLICESTEPS`` = ``NCCL_STEPS / 4`` = 2.
* ``src/enqueue.cc`` (``calcCollChunking``): step size = buffer size / ``NCCL_STEPS``; chunk =
  step x chunk steps for Simple ring (1 step otherwise), halved for LL, x 15/16 for LL128, aligned
  down to the grain: Simple 2 MiB, LL 32 KiB, LL128 576,000 B of data; a channel's work is one
  contiguous part of the buffer (``ncclCollCbdPart``, ``src/include/device.h``).
* ``src/device/all_reduce.h`` (``runRing``): loops of n chunks; in the last loop the chunk is
  ``alignUp(divUp(rest, n), 16 / sizeof(T))`` elements; ``src/device/prims_simple.h``: a Simple
  chunk of e elements goes as slices of ``max(divUp(e, 32) x 16, slice / 32)`` (two at most).
* ``src/transport/net.cc``: the proxy posts one network send per slice (``sliceSteps`` steps).

Where genie differs, on purpose: channel parts are even splits on element edges (NCCL rounds them
to cells of its own), slices of a loop's chunks are cut alike (NCCL cuts each chunk by its own
length; they differ only in the last loop), a slice that is empty still goes as a message with
no bytes (NCCL posts empty slices too), and the flag bytes of a message travel as one block in
front of its data (NCCL interleaves them line by line): the same bytes on the wire per message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from genie.collectives.program import ProgramSpec, Step
from genie.errors import CollectiveError

Range = tuple[int, int]  # (offset, nbytes)

SIMPLE, LL128, LL = 0, 1, 2
PROTOCOLS = ("simple", "ll128", "ll")  # index = the option's value
NCCL_VERSION = "NVIDIA/nccl 2.30.7 (commit 5067397c)"
NCCL_STEPS = 8
MAX_CHANNELS = 64  # MAXCHANNELS, src/include/device.h
BUFFSIZE = {LL: 8 * 512 * 8 * 16, LL128: 120 * 640 * 8 * 8, SIMPLE: 1 << 22}
GRAIN = {LL: 16, LL128: 1920, SIMPLE: 512}
RING_CHUNKSTEPS = NCCL_STEPS // 2
RING_SLICESTEPS = NCCL_STEPS // 4
LL_LINE, LL_DATA = 16, 8
LL128_LINE, LL128_DATA = 128, 120
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")

# ProgramSpec.options keys of the style (``nccl_channels`` present: the program is NCCL-style)
OPT_CHANNELS, OPT_PROTO, OPT_BUFFSIZE = "nccl_channels", "nccl_proto", "nccl_buffsize"


@dataclass(frozen=True)
class NcclStyle:
    """How NCCL would run a ring: ``channels``, protocol ``proto`` (a ``PROTOCOLS`` name) and
    the protocol's buffer size (0: NCCL's default; like ``NCCL_BUFFSIZE`` and its kin)."""

    channels: int = 1
    proto: str = "simple"
    buffsize: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.channels, int) or not 1 <= self.channels <= MAX_CHANNELS:
            raise CollectiveError(
                f"NCCL channels must be an integer 1..{MAX_CHANNELS}: {self.channels!r}"
            )
        if self.proto not in PROTOCOLS:
            raise CollectiveError(
                f"NCCL protocol {self.proto!r}: use one of {', '.join(PROTOCOLS)}"
            )
        least = NCCL_STEPS * GRAIN[self.proto_id] * 2
        if self.buffsize and self.buffsize < least:
            raise CollectiveError(
                f"NCCL buffer size {self.buffsize} B is below {least} B for {self.proto}"
            )

    @property
    def proto_id(self) -> int:
        """The protocol's number in ``PROTOCOLS``."""
        return PROTOCOLS.index(self.proto)

    def options(self) -> dict[str, int]:
        """The ``ProgramSpec.options`` entries that carry this style."""
        out = {OPT_CHANNELS: self.channels, OPT_PROTO: self.proto_id}
        if self.buffsize:
            out[OPT_BUFFSIZE] = self.buffsize
        return out

    def describe(self) -> str:
        """One phrase for outputs: ``NCCL-style ring, 2 channels, LL128``."""
        many = "s" if self.channels != 1 else ""
        buf = f", buffer {self.buffsize} B" if self.buffsize else ""
        return f"NCCL-style ring, {self.channels} channel{many}, {self.proto.upper()}{buf}"


def style_of(spec: ProgramSpec) -> NcclStyle | None:
    """The NCCL style a spec carries (None: a plain genie program)."""
    o = spec.options
    if OPT_CHANNELS not in o:
        return None
    p = o.get(OPT_PROTO, SIMPLE)
    if not 0 <= p < len(PROTOCOLS):
        raise CollectiveError(f"NCCL protocol number {p} is not one of 0..{len(PROTOCOLS) - 1}")
    return NcclStyle(o[OPT_CHANNELS], PROTOCOLS[p], o.get(OPT_BUFFSIZE, 0))


def step_bytes(style: NcclStyle) -> int:
    """Bytes of one FIFO step of the protocol's buffer (flags included)."""
    return (style.buffsize or BUFFSIZE[style.proto_id]) // NCCL_STEPS


def chunk_bytes(style: NcclStyle) -> int:
    """Data bytes of one ring chunk (``calcCollChunking``), aligned down to the grain."""
    p = style.proto_id
    step = step_bytes(style)
    if p == SIMPLE:
        chunk = step * RING_CHUNKSTEPS
    elif p == LL:
        chunk = step // 2
    else:
        chunk = step // (LL128_LINE // 8) * (LL128_DATA // 8)
    return max(GRAIN[p], chunk // GRAIN[p] * GRAIN[p])


def wire_bytes(proto: int, nbytes: int) -> int:
    """Bytes a message of ``nbytes`` data puts on the wire under protocol ``proto``: Simple the
    data, LL 16-byte lines of 8 data bytes, LL128 128-byte lines of 120 data bytes."""
    if proto == LL:
        return -(-nbytes // LL_DATA) * LL_LINE
    if proto == LL128:
        return -(-nbytes // LL128_DATA) * LL128_LINE
    return nbytes


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _slices(style: NcclStyle, chunk_elems: int, elem: int) -> tuple[int, int]:
    """(slices per chunk, elements per slice) of a chunk of ``chunk_elems`` elements."""
    if style.proto_id != SIMPLE or chunk_elems <= 0:
        return 1, max(chunk_elems, 1)
    slice_elems = step_bytes(style) * RING_SLICESTEPS // elem
    per = max(
        _div_up(chunk_elems, 16 * (RING_CHUNKSTEPS // RING_SLICESTEPS)) * 16, slice_elems // 32
    )
    per = max(per, 1)
    return min(RING_CHUNKSTEPS // RING_SLICESTEPS, _div_up(chunk_elems, per)), per


def _clip(off: int, nb: int, start: int, length: int) -> Range:
    """Bytes ``[start, start + length)`` of the range ``(off, nb)``, clipped (maybe empty)."""
    lo = min(max(start, 0), nb)
    hi = min(max(start + length, lo), nb)
    return (off + lo, hi - lo)


def _even(off: int, nb: int, parts: int, j: int, elem: int) -> Range:
    units = nb // elem
    base, rem = divmod(units, parts)
    start = off + (base * j + min(j, rem)) * elem
    return (start, (base + (1 if j < rem else 0)) * elem)


def _all_reduce_channel(
    style: NcclStyle, part: Range, n: int, elem: int
) -> list[tuple[Range, ...]]:
    """The pieces of one channel's part of an all-reduce: per loop and slice, n shard ranges."""
    off, nb = part
    full = max(1, chunk_bytes(style) // elem)  # chunk, elements
    align = max(1, 16 // elem)
    out: list[tuple[Range, ...]] = []
    done = 0
    while done < nb:
        rest = (nb - done) // elem
        cc = full if rest >= n * full else _div_up(_div_up(rest, n), align) * align
        nsl, per = _slices(style, cc, elem)
        for s in range(nsl):
            length = min(per, cc - s * per) * elem
            start = s * per * elem
            out.append(
                tuple(_clip(off + done, nb - done, j * cc * elem + start, length) for j in range(n))
            )
        done += n * cc * elem
    return out


def _shard_channel(style: NcclStyle, parts: Sequence[Range], elem: int) -> list[tuple[Range, ...]]:
    """The pieces of one channel of an all-gather / reduce-scatter (``parts``: this channel's
    part of each rank's shard): per loop and slice, n ranges."""
    cc = max(1, chunk_bytes(style) // elem)
    longest = max((nb for _, nb in parts), default=0) // elem
    out: list[tuple[Range, ...]] = []
    for lo in range(0, longest, cc):
        nsl, per = _slices(style, min(cc, longest - lo), elem)
        for s in range(nsl):
            start = (lo + s * per) * elem
            out.append(tuple(_clip(o, nb, start, per * elem) for o, nb in parts))
    return out


@functools.lru_cache(maxsize=32)
def _pieces(
    coll: str, n: int, shards: tuple[Range, ...], whole: int, elem: int, style: NcclStyle
) -> tuple[tuple[tuple[int, tuple[Range, ...]], ...], tuple[int, ...]]:
    per_channel: list[list[tuple[Range, ...]]] = []
    for ch in range(style.channels):
        if coll == "all_reduce":
            per_channel.append(
                _all_reduce_channel(style, _even(0, whole, style.channels, ch, elem), n, elem)
            )
        else:
            parts = [_even(o, nb, style.channels, ch, elem) for o, nb in shards]
            per_channel.append(_shard_channel(style, parts, elem))
    out: list[tuple[int, tuple[Range, ...]]] = []
    after: list[int] = []
    last: dict[int, int] = {}
    for k in range(max((len(p) for p in per_channel), default=0)):
        for ch, ps in enumerate(per_channel):  # channels interleaved, as they run side by side
            if k < len(ps):
                after.append(last.get(ch, -1))
                last[ch] = len(out)
                out.append((ch, ps[k]))
    if not out:  # nothing to move: one empty piece keeps the program well formed
        out, after = [(0, tuple((0, 0) for _ in range(n)))], [-1]
    return tuple(out), tuple(after)


def _key(spec: ProgramSpec, style: NcclStyle):
    from genie.collectives.layout import buffer_bytes, elem_of, shards

    if spec.collective not in COLLECTIVES or spec.algorithm != "ring":
        raise CollectiveError(
            f"NCCL style runs ring {', '.join(COLLECTIVES)}, not {spec.collective}/{spec.algorithm}"
        )
    sh = tuple(shards(spec)) if spec.collective != "all_reduce" else ()
    return spec.collective, spec.n_ranks, sh, buffer_bytes(spec), elem_of(spec), style


def pieces(spec: ProgramSpec) -> tuple[tuple[int, tuple[Range, ...]], ...]:
    """Per piece (``Step.chunk``): (its channel, the n shard ranges of the ring it runs)."""
    style = style_of(spec)
    if style is None:
        raise CollectiveError("not an NCCL-style program")
    return _pieces(*_key(spec, style))[0]


def piece_count(spec: ProgramSpec) -> int:
    """How many pieces (the spec's ``chunks``) an NCCL-style spec runs."""
    return len(pieces(spec))


def pipeline_after(spec: ProgramSpec) -> tuple[int, ...]:
    """Per piece, the earlier piece of the same channel it pipelines behind (-1: none)."""
    style = style_of(spec)
    if style is None:
        raise CollectiveError("not an NCCL-style program")
    return _pieces(*_key(spec, style))[1]


def piece_channels(spec: ProgramSpec) -> tuple[int, ...]:
    """Per piece, its channel: the connection its steps' bytes take."""
    return tuple(ch for ch, _ in pieces(spec))


def channel_fn(spec: ProgramSpec) -> Callable[[Step], int] | None:
    """Step -> its channel for an NCCL-style spec (None for any other program)."""
    if style_of(spec) is None:
        return None
    chans = piece_channels(spec)
    return lambda st: chans[st.chunk]


def wire_fn(spec: ProgramSpec) -> Callable[[int], int] | None:
    """Data bytes -> bytes on the wire for the spec's protocol (None: the data alone)."""
    style = style_of(spec)
    if style is None or style.proto_id == SIMPLE:
        return None
    p = style.proto_id
    return lambda nbytes: wire_bytes(p, nbytes)
