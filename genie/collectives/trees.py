"""Tree algorithms: binomial-tree broadcast and reduce, tree all-reduce, double binary tree.

Binomial tree, relative to the root (v = (r - root) mod n): v's parent is v minus its lowest set
bit; v sends to v + 2^j for the 2^j below its lowest set bit, largest subtree first, one after
the other. Reduce runs the same tree upwards. The double binary tree (NCCL's all-reduce for
latency) splits each chunk in halves, reduces half 0 up tree A and half 1 up tree B, then
broadcasts each back down its tree; tree B is tree A shifted by one rank (mirrored for odd n),
so most ranks are inner nodes in one tree and leaves in the other.
"""

from __future__ import annotations

from collections.abc import Sequence

from genie.collectives.emit import Emit
from genie.collectives.layout import Range, chunk_range, split
from genie.collectives.program import ProgramSpec


def _binomial(n: int, v: int) -> tuple[int, list[int]]:
    """(parent, children largest-first) of relative rank v in a binomial tree of n."""
    if v == 0:
        parent, low = -1, 1
        while low < n:
            low *= 2
    else:
        low = v & -v
        parent = v - low
    children = []
    m = low // 2
    while m >= 1:
        if v + m < n:
            children.append(v + m)
        m //= 2
    return parent, children


def bcast_phase(
    e: Emit, parent: int, children: Sequence[int], rng: Range, after: Sequence[int]
) -> list[int]:
    """Receive ``rng`` from parent (if any), then send it to each child in turn."""
    prev = list(after)
    if parent >= 0:
        prev = [e.copy(e.recv(parent, rng[1]), rng, prev)]
    for ch in children:
        prev = [e.send(ch, rng, prev)]
    return prev


def reduce_phase(
    e: Emit, parent: int, children: Sequence[int], rng: Range, after: Sequence[int]
) -> list[int]:
    """Reduce ``rng`` from each child (smallest subtree first), then send it to the parent."""
    prev = list(after)
    for ch in reversed(children):
        prev = [e.reduce(e.recv(ch, rng[1]), rng, prev)]
    if parent >= 0:
        prev = [e.send(parent, rng, prev)]
    return prev


def _abs(spec: ProgramSpec, v: int) -> int:
    return (v + spec.root) % spec.n_ranks if v >= 0 else -1


def broadcast(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Binomial-tree broadcast from ``root``."""
    n = spec.n_ranks
    parent, children = _binomial(n, (rank - spec.root) % n)
    rng = chunk_range(spec, e.chunk)
    bcast_phase(e, _abs(spec, parent), [_abs(spec, c) for c in children], rng, ())


def reduce(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Binomial-tree reduce to ``root``."""
    n = spec.n_ranks
    parent, children = _binomial(n, (rank - spec.root) % n)
    rng = chunk_range(spec, e.chunk)
    reduce_phase(e, _abs(spec, parent), [_abs(spec, c) for c in children], rng, ())


def tree_all_reduce(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """All-reduce as a binomial reduce to ``root`` then a binomial broadcast from it."""
    n = spec.n_ranks
    parent, children = _binomial(n, (rank - spec.root) % n)
    p, cs = _abs(spec, parent), [_abs(spec, c) for c in children]
    rng = chunk_range(spec, e.chunk)
    tail = reduce_phase(e, p, cs, rng, ())
    bcast_phase(e, p, cs, rng, tail)


def _bst(lo: int, hi: int, parent: int, out: dict[int, tuple[int, list[int]]]) -> int:
    """Balanced binary tree over lo..hi-1 (root = middle); fills rank -> (parent, children)."""
    if lo >= hi:
        return -1
    mid = (lo + hi) // 2
    kids = [k for k in (_bst(lo, mid, mid, out), _bst(mid + 1, hi, mid, out)) if k >= 0]
    out[mid] = (parent, kids)
    return mid


def _btree(n: int, rank: int, shifted: bool) -> tuple[int, list[int]]:
    """(parent, children) of ``rank`` in tree A, or in tree B when ``shifted``."""
    if shifted:
        to_a = (lambda r: n - 1 - r) if n % 2 else (lambda r: (r - 1) % n)
        from_a = (lambda a: n - 1 - a) if n % 2 else (lambda a: (a + 1) % n)
    else:
        to_a = from_a = lambda r: r
    tree: dict[int, tuple[int, list[int]]] = {}
    _bst(0, n, -1, tree)
    parent, kids = tree[to_a(rank)]
    return (from_a(parent) if parent >= 0 else -1), [from_a(k) for k in kids]


def double_binary_tree(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Double binary tree all-reduce: each half of the chunk up and down its own tree."""
    n = spec.n_ranks
    if n < 2:
        return
    off, nb = chunk_range(spec, e.chunk)
    halves = split(off, nb, 2, spec.options.get("elem", 1))
    tails = []
    for t, rng in enumerate(halves):
        parent, kids = _btree(n, rank, shifted=t == 1)
        tails.append((parent, kids, rng, reduce_phase(e, parent, kids, rng, ())))
    for parent, kids, rng, tail in tails:
        bcast_phase(e, parent, kids, rng, tail)
