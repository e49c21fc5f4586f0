"""Direct algorithms: every rank talks to every other rank, at most ``window`` sends in flight.

Rank r sends to r+1, r+2, ... (mod n) in that order; the send to r+s waits for the send to
r+s-window, so a window of K keeps at most K sends on the wire at once (a send is done when its
bytes are out; its latency overlaps the next one). Also the pairwise send/recv.
"""

from __future__ import annotations

from genie.collectives.emit import Emit
from genie.collectives.layout import (
    a2a_block,
    chunk_range,
    chunk_segments,
    piece,
    split_matrix,
    v_layout,
)
from genie.collectives.program import ProgramSpec


def window_of(spec: ProgramSpec) -> int:
    """Sends in flight per rank (default: all n-1)."""
    w = spec.options.get("window", 0)
    return w if w > 0 else max(1, spec.n_ranks - 1)


def _windowed_sends(spec: ProgramSpec, rank: int, e: Emit, rng_for, after=()) -> dict[int, int]:
    """Emit the sends to r+1..r+n-1 with the window; returns shift -> send index."""
    n, k = spec.n_ranks, window_of(spec)
    sends: dict[int, int] = {}
    for s in range(1, n):
        deps = [sends[s - k]] if s - k >= 1 else []
        deps.extend(after)
        sends[s] = e.send((rank + s) % n, rng_for((rank + s) % n), deps)
    return sends


def all_to_all_v(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Uneven direct all-to-all: rank r's block for j, from the send area to j's receive area.

    Peers it sends nothing to (or receives nothing from) are skipped on both sides, the window
    counting only real sends; send and receive areas never overlap, so copies wait on nothing.
    """
    n, c, k = spec.n_ranks, e.chunk, window_of(spec)
    m = split_matrix(spec)
    _, send, recv = v_layout(spec)
    elem = spec.options.get("elem", 1)
    sends: list[int] = []
    for s in range(1, n):
        j = (rank + s) % n
        rng = piece(send[rank][j], m[rank][j], spec.chunks, c, elem)
        if rng[1]:
            deps = [sends[-k]] if len(sends) >= k else []
            sends.append(e.send(j, rng, deps))
    for s in range(1, n):
        i = (rank - s) % n
        rng = piece(recv[rank][i], m[i][rank], spec.chunks, c, elem)
        if rng[1]:
            e.copy(e.recv(i, rng[1]), rng)


def all_to_all(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Direct all-to-all: block j of rank r goes to block r of rank j (in place)."""
    if spec.splits:
        all_to_all_v(spec, rank, e)
        return
    n, c = spec.n_ranks, e.chunk
    b = a2a_block(spec)
    pieces = [piece(j * b, b, spec.chunks, c, spec.options.get("elem", 1)) for j in range(n)]
    sends = _windowed_sends(spec, rank, e, lambda peer: pieces[peer])
    for s in range(1, n):
        src_rank = (rank - s) % n
        r = e.recv(src_rank, pieces[src_rank][1])
        # block src_rank is overwritten only after it was sent to src_rank (shift n - s)
        e.copy(r, pieces[src_rank], [sends[n - s]])


def all_gather(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Direct all-gather: send my shard to everyone, copy everyone's shard in."""
    n = spec.n_ranks
    segs = chunk_segments(spec, e.chunk)
    _windowed_sends(spec, rank, e, lambda _peer: segs[rank])
    for s in range(1, n):
        src_rank = (rank - s) % n
        r = e.recv(src_rank, segs[src_rank][1])
        e.copy(r, segs[src_rank])


def _reduce_scatter(spec: ProgramSpec, rank: int, e: Emit, segs) -> list[int]:
    n = spec.n_ranks
    _windowed_sends(spec, rank, e, lambda peer: segs[peer])
    prev: list[int] = []
    for s in range(1, n):
        r = e.recv((rank - s) % n, segs[rank][1])
        prev = [e.reduce(r, segs[rank], prev)]
    return e.sinks()


def reduce_scatter(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Direct reduce-scatter: send shard j to rank j, reduce everyone's copy of my shard."""
    _reduce_scatter(spec, rank, e, chunk_segments(spec, e.chunk))


def all_reduce(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Direct all-reduce: direct reduce-scatter, then direct all-gather of the reduced shards."""
    n = spec.n_ranks
    segs = chunk_segments(spec, e.chunk)
    tail = _reduce_scatter(spec, rank, e, segs)
    _windowed_sends(spec, rank, e, lambda _peer: segs[rank], after=tail)
    for s in range(1, n):
        src_rank = (rank - s) % n
        r = e.recv(src_rank, segs[src_rank][1])
        e.copy(r, segs[src_rank], tail)


def send_recv(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Pairwise: rank r sends to r+1 and receives from r-1 (nccl-tests sendrecv).

    With option ``oneway=1`` only ``root`` sends, to ``root + 1``.
    """
    n = spec.n_ranks
    if n < 2:
        return
    rng = chunk_range(spec, e.chunk)
    if spec.options.get("oneway", 0):
        if rank == spec.root:
            e.send((rank + 1) % n, rng)
        elif rank == (spec.root + 1) % n:
            e.copy(e.recv(spec.root, rng[1]), rng)
        return
    snd = e.send((rank + 1) % n, rng)
    e.copy(e.recv((rank - 1) % n, rng[1]), rng, [snd])
