"""Where a collective's bytes live: buffer size, shards, chunk pieces, input and result regions.

Sizes follow ASTRA-sim by default: ``size`` is the whole buffer for every collective except
all-gather, where it is the per-rank shard (the buffer is ``n * size``). With the nccl-tests
convention (option ``nccl=1``) ``size`` is always the whole buffer. Shards of a buffer that does
not divide by n are uneven: the first ``units % n`` shards hold one element more. An element is
``elem`` bytes (option, default 1), so shard edges fall on element boundaries.

An uneven all-to-all (all-to-all-v, ``spec.splits``: n x n bytes, row i what rank i sends to
rank j) keeps what it sends and what it receives apart: the send area ``[0, R)`` holds rank r's
blocks for ranks 0..n-1 in order (R the largest row total), the receive area ``[R, R + C)`` the
blocks from ranks 0..n-1 in order (C the largest column total); the block a rank sends itself
stays where it is, in the send area.

Chunking splits a collective into C independent sub-collectives: for reduce-scatter, all-gather
and all-to-all chunk c is piece c of every shard (so each rank's shard stays its own); for the
other collectives chunk c is the c-th contiguous piece of the buffer, split into n shards.
"""

from __future__ import annotations

from genie.collectives.program import ProgramSpec

Range = tuple[int, int]  # (offset, nbytes)

SHARD_PIECE = frozenset({"reduce_scatter", "all_gather", "all_to_all"})


def split(offset: int, nbytes: int, parts: int, elem: int = 1) -> list[Range]:
    """Split ``nbytes`` at ``offset`` into ``parts`` ranges on element edges, larger ones first."""
    return [piece(offset, nbytes, parts, j, elem) for j in range(parts)]


def piece(offset: int, nbytes: int, parts: int, j: int, elem: int = 1) -> Range:
    """Range ``j`` of ``split(offset, nbytes, parts, elem)``, without building the others.

    Chunked programs ask for one piece per chunk: building the whole split each time made
    planning quadratic in chunks (10,000 chunks: tens of seconds).
    """
    units = nbytes // elem
    base, rem = divmod(units, parts)
    start = offset + (base * j + min(j, rem)) * elem
    n = (base + (1 if j < rem else 0)) * elem
    if j == parts - 1:  # bytes below one element (only when nbytes % elem != 0) go to the last
        n += nbytes - units * elem
    return (start, n)


def elem_of(spec: ProgramSpec) -> int:
    """Element size in bytes."""
    return spec.options.get("elem", 1)


def split_matrix(spec: ProgramSpec) -> list[list[int]]:
    """The all-to-all-v bytes as rows: ``m[i][j]`` is what group rank i sends to rank j."""
    n = spec.n_ranks
    s = spec.splits
    return [list(s[i * n : (i + 1) * n]) for i in range(n)]


def v_layout(spec: ProgramSpec) -> tuple[int, list[list[int]], list[list[int]]]:
    """All-to-all-v: (R, send offsets [rank][peer], receive offsets [rank][source])."""
    m = split_matrix(spec)
    n = spec.n_ranks
    rows = max((sum(r) for r in m), default=0)
    send = []
    recv = []
    for r in range(n):
        acc, offs = 0, []
        for j in range(n):
            offs.append(acc)
            acc += m[r][j]
        send.append(offs)
        acc, offs = rows, []
        for i in range(n):
            offs.append(acc)
            acc += m[i][r]
        recv.append(offs)
    return rows, send, recv


def buffer_bytes(spec: ProgramSpec) -> int:
    """Bytes of every rank's working buffer."""
    if spec.splits:
        m = split_matrix(spec)
        n = spec.n_ranks
        rows = max((sum(r) for r in m), default=0)
        cols = max((sum(m[i][j] for i in range(n)) for j in range(n)), default=0)
        return rows + cols
    if spec.collective == "all_gather" and not spec.options.get("nccl", 0):
        return spec.size * spec.n_ranks
    return spec.size


def a2a_block(spec: ProgramSpec) -> int:
    """Bytes of one all-to-all block; the tail beyond ``n * block`` stays where it is."""
    e = elem_of(spec)
    return (spec.size // e // spec.n_ranks) * e


def shards(spec: ProgramSpec) -> list[Range]:
    """The n shards of the whole buffer (all-to-all: the n blocks)."""
    n = spec.n_ranks
    if spec.collective == "all_to_all":
        b = a2a_block(spec)
        return [(j * b, b) for j in range(n)]
    return split(0, buffer_bytes(spec), n, elem_of(spec))


def chunk_range(spec: ProgramSpec, c: int) -> Range:
    """Contiguous piece ``c`` of the buffer (for collectives chunked by contiguous pieces)."""
    return piece(0, buffer_bytes(spec), spec.chunks, c, elem_of(spec))


def chunk_segments(spec: ProgramSpec, c: int) -> list[Range]:
    """For chunk ``c``: the range of shard j, for each j in 0..n-1 (an NCCL-style program: of
    its piece ``c``, ``genie.collectives.nccl_wire``)."""
    if "nccl_channels" in spec.options:
        from genie.collectives.nccl_wire import pieces

        return list(pieces(spec)[c][1])
    e = elem_of(spec)
    if spec.collective in SHARD_PIECE:
        return [piece(off, nb, spec.chunks, c, e) for off, nb in shards(spec)]
    off, nb = chunk_range(spec, c)
    return split(off, nb, spec.n_ranks, e)


def input_region(spec: ProgramSpec, rank: int) -> Range:
    """The part of ``rank``'s buffer that holds its input when the collective starts."""
    if spec.splits:
        return (0, sum(split_matrix(spec)[rank]))
    if spec.collective == "all_gather":
        return shards(spec)[rank]
    return (0, buffer_bytes(spec))


def result_regions(spec: ProgramSpec, rank: int) -> list[Range]:
    """The parts of ``rank``'s buffer that hold its result when the collective ends."""
    coll, whole = spec.collective, (0, buffer_bytes(spec))
    if coll == "reduce_scatter":
        return [shards(spec)[rank]]
    if coll == "reduce":
        return [whole] if rank == spec.root else []
    if coll == "send_recv" and spec.options.get("oneway", 0):
        return [whole] if rank == (spec.root + 1) % spec.n_ranks else []
    if coll == "all_to_all" and spec.splits:
        m = split_matrix(spec)
        _, send, recv = v_layout(spec)
        out = [(recv[rank][i], m[i][rank]) for i in range(spec.n_ranks) if i != rank]
        out.append((send[rank][rank], m[rank][rank]))
        return [x for x in out if x[1]]
    if coll == "all_to_all":
        b = a2a_block(spec)
        return [(0, b * spec.n_ranks)]
    return [whole]


def merge_ranges(ranges: list[Range]) -> list[Range]:
    """Join adjacent ranges (kept in order) so a transfer uses as few messages as possible."""
    out: list[Range] = []
    for off, nb in ranges:
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + nb)
        else:
            out.append((off, nb))
    return out
