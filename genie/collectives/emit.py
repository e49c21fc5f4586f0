"""Helpers the algorithm builders write steps with: one ``Emit`` per chunk, merged per rank.

Each chunk's steps are emitted with chunk-local indices; ``merge`` interleaves the chunks
round-robin (step i of chunk 0, step i of chunk 1, ...) and rewrites dependency indices to the
merged positions. Chunks *pipeline*: the i-th SEND of chunk c also waits for the i-th SEND of
chunk c-1 (same peer), so a link carries one chunk of a step at a time and chunk c enters a step
as chunk c-1 leaves it, as NCCL's pipelined chunks do. With C chunks a k-step algorithm then
takes k + C - 1 stages, each paying the per-message latency on a C-times smaller message: more
chunks, more latency terms, more overlap between steps.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Sequence

from genie.collectives.layout import Range
from genie.collectives.program import Op, Step

# a raw step: (op, peer, nbytes, tag, offset, src, deps)
Raw = tuple[Op, int, int, int, int, int, tuple[int, ...]]


class Emit:
    """Collects the raw steps of one chunk of one rank."""

    __slots__ = ("chunk", "steps", "tag")

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.tag = chunk
        self.steps: list[Raw] = []

    def _add(self, raw: Raw) -> int:
        self.steps.append(raw)
        return len(self.steps) - 1

    def send(self, peer: int, rng: Range, deps: Iterable[int] = ()) -> int:
        """SEND ``rng`` of the buffer to ``peer``."""
        return self._add((Op.SEND, peer, rng[1], self.tag, rng[0], -1, tuple(deps)))

    def recv(self, peer: int, nbytes: int, deps: Iterable[int] = ()) -> int:
        """RECV ``nbytes`` from ``peer`` into scratch."""
        return self._add((Op.RECV, peer, nbytes, self.tag, 0, -1, tuple(deps)))

    def reduce(self, src: int, rng: Range, deps: Iterable[int] = ()) -> int:
        """REDUCE the scratch of RECV ``src`` into ``rng`` (depends on ``src``)."""
        return self._add((Op.REDUCE, -1, rng[1], 0, rng[0], src, (src, *deps)))

    def copy(self, src: int, rng: Range, deps: Iterable[int] = ()) -> int:
        """COPY the scratch of RECV ``src`` into ``rng`` (depends on ``src``)."""
        return self._add((Op.COPY, -1, rng[1], 0, rng[0], src, (src, *deps)))

    # -- transfers of several ranges (one message per range) -----------------------------

    def send_ranges(self, peer: int, ranges: Sequence[Range], deps: Sequence[int]) -> list[int]:
        """SEND each range to ``peer``; returns the SEND indices."""
        return [self.send(peer, r, deps) for r in ranges]

    def recv_into(
        self, peer: int, ranges: Sequence[Range], deps: Sequence[int], *, reduce: bool
    ) -> list[int]:
        """RECV each range from ``peer`` and REDUCE (or COPY) it in; returns those indices."""
        out = []
        for r in ranges:
            src = self.recv(peer, r[1])
            out.append(self.reduce(src, r, deps) if reduce else self.copy(src, r, deps))
        return out

    def sinks(self, since: int = 0) -> list[int]:
        """Indices >= ``since`` that no later step depends on (the tail of a phase)."""
        used: set[int] = set()
        for raw in self.steps[since:]:
            used.update(raw[6])
        return [i for i in range(since, len(self.steps)) if i not in used]


def merge(chunks: Sequence[Emit], after: Sequence[int] | None = None) -> list[Step]:
    """Interleave per-chunk steps round-robin into one rank's step list.

    ``after[c]``: the chunk (list position) chunk ``c`` pipelines behind, -1 for none (default:
    the one before it); NCCL-style programs pipeline each channel's pieces apart.
    """
    if len(chunks) == 1:
        c = chunks[0].chunk
        return [Step(r[0], r[1], r[2], r[3], r[4], r[5], r[6], c) for r in chunks[0].steps]
    lists = [e.steps for e in chunks]
    n_chunks = len(lists)
    length = len(lists[0])
    out: list[Step] = []
    if all(len(s) == length for s in lists):  # the usual case: position i*C + c
        for i in range(length):
            for ci in range(n_chunks):
                op, peer, nbytes, tag, offset, src, deps = lists[ci][i]
                mapped = [d * n_chunks + ci for d in deps]
                pc = ci - 1 if after is None else after[ci]
                if pc >= 0 and op == Op.SEND and _same_send(lists[pc][i], peer):
                    mapped.append(i * n_chunks + pc)  # pipeline behind the previous chunk
                out.append(
                    Step(
                        op,
                        peer,
                        nbytes,
                        tag,
                        offset,
                        src * n_chunks + ci if src >= 0 else -1,
                        tuple(mapped),
                        chunks[ci].chunk,
                    )
                )
        return out
    longest = max(len(s) for s in lists)
    maps: list[list[int]] = [[0] * len(s) for s in lists]
    order: list[tuple[int, int]] = []
    for i in range(longest):
        for ci, s in enumerate(lists):
            if i < len(s):
                maps[ci][i] = len(order)
                order.append((ci, i))
    for ci, i in order:
        op, peer, nbytes, tag, offset, src, deps = lists[ci][i]
        m = maps[ci]
        mapped = [m[d] for d in deps]
        pc = ci - 1 if after is None else after[ci]
        prev = lists[pc] if pc >= 0 else []
        if pc >= 0 and op == Op.SEND and i < len(prev) and _same_send(prev[i], peer):
            mapped.append(maps[pc][i])  # pipeline behind the previous chunk
        out.append(
            Step(
                op,
                peer,
                nbytes,
                tag,
                offset,
                m[src] if src >= 0 else -1,
                tuple(mapped),
                chunks[ci].chunk,
            )
        )
    return out


def _same_send(raw: Raw, peer: int) -> bool:
    return raw[0] == Op.SEND and raw[1] == peer


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while allocating many acyclic objects (steps, events).

    Building and simulating programs allocates millions of small objects that hold no cycles;
    the collector's full passes over them cost more than the work itself on large programs.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
