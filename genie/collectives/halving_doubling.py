"""Recursive halving (reduce-scatter) and doubling (all-gather), and all-reduce as both.

For n not a power of two, the usual fold-in: with p the largest power of two <= n and
x = n - p, ranks 2i+1 (i < x) hand their data to rank 2i first and get the result back at the
end; the p remaining ranks run the power-of-two algorithm on p virtual shards, where virtual
shard v covers the real shards of the ranks folded into virtual rank v.
"""

from __future__ import annotations

from genie.collectives.emit import Emit
from genie.collectives.layout import SHARD_PIECE, Range, chunk_segments, merge_ranges
from genie.collectives.program import ProgramSpec


class _Fold:
    """The fold-in mapping between real ranks and virtual ranks."""

    def __init__(self, n: int, scattered: bool = False) -> None:
        p = 1
        while p * 2 <= n:
            p *= 2
        self.n, self.p, self.x = n, p, n - p
        self.scattered = scattered  # shards are not back to back (chunk pieces of shards)

    def virtual(self, r: int) -> int:
        """Virtual rank of real rank r, or -1 if r is folded away."""
        if r < 2 * self.x:
            return r // 2 if r % 2 == 0 else -1
        return r - self.x

    def real(self, v: int) -> int:
        """Real rank running virtual rank v."""
        return 2 * v if v < self.x else v + self.x

    def members(self, v: int) -> list[int]:
        """Real shards covered by virtual shard v."""
        return [2 * v, 2 * v + 1] if v < self.x else [v + self.x]


def _fold(spec: ProgramSpec) -> _Fold:
    return _Fold(spec.n_ranks, spec.chunks > 1 and spec.collective in SHARD_PIECE)


def _vranges(fold: _Fold, segs: list[Range], lo: int, hi: int) -> list[Range]:
    """Byte ranges of virtual shards lo..hi-1 (real shards a..b-1, consecutive)."""
    a, b = fold.members(lo)[0], fold.members(hi - 1)[-1] + 1
    first, last = segs[a], segs[b - 1]
    if fold.scattered:
        return merge_ranges(segs[a:b])
    return [(first[0], last[0] + last[1] - first[0])]


def _halving(e: Emit, fold: _Fold, v: int, segs: list[Range], after: list[int]):
    """Recursive halving among virtual ranks; returns (last reduces, all sends)."""
    lo, size = 0, fold.p
    prev, sends = list(after), []
    while size > 1:
        half = size // 2
        peer = fold.real(v ^ half)
        if v - lo < half:
            keep, give = (lo, lo + half), (lo + half, lo + size)
        else:
            keep, give = (lo + half, lo + size), (lo, lo + half)
        sends += e.send_ranges(peer, _vranges(fold, segs, *give), prev)
        prev = e.recv_into(peer, _vranges(fold, segs, *keep), prev, reduce=True)
        lo, size = keep[0], half
    return prev, sends


def _doubling(e: Emit, fold: _Fold, v: int, segs: list[Range], after: list[int]) -> list[int]:
    """Recursive doubling among virtual ranks; returns every COPY it made."""
    dist = 1
    prev, copies = list(after), []
    while dist < fold.p:
        peer_v = v ^ dist
        mine = v - v % dist
        theirs = peer_v - peer_v % dist
        e.send_ranges(fold.real(peer_v), _vranges(fold, segs, mine, mine + dist), prev)
        theirs_r = _vranges(fold, segs, theirs, theirs + dist)
        prev = e.recv_into(fold.real(peer_v), theirs_r, list(after), reduce=False)
        copies += prev
        prev = copies[:]
        dist *= 2
    return copies


def _whole(segs: list[Range]) -> list[Range]:
    return merge_ranges(list(segs))


def reduce_scatter(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Halving-doubling reduce-scatter: rank r ends with reduced shard r."""
    fold, segs = _fold(spec), chunk_segments(spec, e.chunk)
    if spec.n_ranks < 2:
        return
    v = fold.virtual(rank)
    if v < 0:  # folded: hand everything to rank-1, get my reduced shard back
        sends = e.send_ranges(rank - 1, _whole(segs), [])
        e.recv_into(rank - 1, [segs[rank]], sends, reduce=False)
        return
    after = []
    if rank < 2 * fold.x:
        after = e.recv_into(rank + 1, _whole(segs), [], reduce=True)
    prev, _ = _halving(e, fold, v, segs, after)
    if rank < 2 * fold.x:
        e.send(rank + 1, segs[rank + 1], prev)


def all_gather(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Halving-doubling all-gather: recursive doubling on the folded group."""
    n = spec.n_ranks
    fold, segs = _fold(spec), chunk_segments(spec, e.chunk)
    if n < 2:
        return
    v = fold.virtual(rank)
    if v < 0:
        s = e.send(rank - 1, segs[rank])
        rest = merge_ranges(segs[:rank]) + merge_ranges(segs[rank + 1 :])
        e.recv_into(rank - 1, rest, [s], reduce=False)
        return
    after = []
    if rank < 2 * fold.x:
        after = e.recv_into(rank + 1, [segs[rank + 1]], [], reduce=False)
    copies = _doubling(e, fold, v, segs, after)
    if rank < 2 * fold.x:
        rest = merge_ranges(segs[: rank + 1]) + merge_ranges(segs[rank + 2 :])
        e.send_ranges(rank + 1, rest, copies + after)


def all_reduce(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Rabenseifner all-reduce: fold-in, recursive halving, recursive doubling, fold-out."""
    n = spec.n_ranks
    fold, segs = _fold(spec), chunk_segments(spec, e.chunk)
    if n < 2:
        return
    whole = _whole(segs)
    v = fold.virtual(rank)
    if v < 0:
        sends = e.send_ranges(rank - 1, whole, [])
        e.recv_into(rank - 1, whole, sends, reduce=False)
        return
    after = []
    if rank < 2 * fold.x:
        after = e.recv_into(rank + 1, whole, [], reduce=True)
    last, rs_sends = _halving(e, fold, v, segs, after)
    copies = _doubling(e, fold, v, segs, last + rs_sends)
    if rank < 2 * fold.x:
        e.send_ranges(rank + 1, whole, copies + last)
