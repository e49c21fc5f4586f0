"""Step programs: what each rank of a collective does on the wire, as plain data.

A ``Program`` is the plan of one collective on a group of ranks. It is described by a small
``ProgramSpec`` (collective, algorithm, group size, bytes, chunks, options) and the steps of a
rank are built from the spec on demand, deterministically. So a program is shipped to agents as
its spec (a few hundred bytes) and no process ever holds all ranks' steps at once: a 1,024-rank
ring all-reduce costs memory for one rank's steps at a time, not n^2.

Step semantics (shared by every executor: data, cost, TCP/RDMA agents):

* each rank owns one working buffer of ``Program.buffer_bytes(rank)`` bytes;
* ``SEND(peer, offset, nbytes, tag)`` sends ``buffer[offset:offset+nbytes]`` to group rank ``peer``;
* ``RECV(peer, nbytes, tag)`` receives ``nbytes`` from ``peer`` into a scratch area of its own;
  SEND and RECV pair by (sender, receiver, tag) in order;
* ``REDUCE(src, offset, nbytes)`` adds the scratch of RECV step ``src`` element-wise into
  ``buffer[offset:offset+nbytes]``; ``COPY(src, offset, nbytes)`` copies it there;
* ``deps`` are indices of earlier steps of the same rank that must finish before this one starts;
  steps with no pending deps may run concurrently;
* two steps of a rank that touch overlapping buffer bytes, one of them writing, are always
  ordered by a chain of deps (the data executor's race check proves it), so running every
  ready step at once is safe;
* pairing is by position: the k-th SEND from a to b with tag t (in a's step order) meets the
  k-th RECV from a on b with tag t (in b's step order), whatever order they run in; a transport
  that keeps one ordered stream per (peer, tag) must therefore put SENDs to the same (peer, tag)
  on the wire in step order. The tag is the chunk index.

The buffer layout (size conventions, shards, chunk pieces, where inputs and results live) is
in ``genie.collectives.layout``; the algorithms are catalogued in ``genie.collectives.registry``.
Keys of ``ProgramSpec.options``: ``nccl`` (1: nccl-tests size convention), ``window`` (direct:
sends in flight), ``elem`` (element bytes; shard edges fall on elements), ``oneway`` (send_recv:
only ``root`` sends, to ``root + 1``). ``ProgramSpec.splits`` makes an all-to-all uneven
(all-to-all-v): the bytes each rank sends to each other rank (``genie.collectives.layout``).
Builders outside this package (agents' own flows) may add
their own collective names; ``genie.collectives`` plans only the ones it lists.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache

import msgspec


class Op(enum.IntEnum):
    """The kind of a step."""

    SEND = 0
    RECV = 1
    REDUCE = 2
    COPY = 3


class Step(msgspec.Struct, frozen=True, array_like=True):
    """One step of one rank; see the module docstring for the meaning of each field."""

    op: Op
    peer: int = -1
    nbytes: int = 0
    tag: int = 0
    offset: int = 0
    src: int = -1
    deps: tuple[int, ...] = ()
    chunk: int = 0


class ProgramSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to rebuild a program anywhere: the unit shipped to agents."""

    collective: str
    algorithm: str
    n_ranks: int
    size: int
    chunks: int = 1
    root: int = 0
    options: dict[str, int] = {}
    ranks: tuple[int, ...] = ()  # global rank of each group rank; empty means 0..n-1
    ranks_per_host: int = 1  # for hierarchical algorithms: group ranks i*k..i*k+k-1 share a host
    # all-to-all-v: n x n bytes, row-major: what group rank i sends to group rank j (empty: even)
    splits: tuple[int, ...] = ()

    def global_rank(self, group_rank: int) -> int:
        """Map a group-local rank to its global rank."""
        return self.ranks[group_rank] if self.ranks else group_rank


StepBuilder = Callable[[ProgramSpec, int], list[Step]]


class Program:
    """A collective planned per rank; steps come from the spec through the algorithm's builder."""

    __slots__ = ("_builder", "_cached", "spec")

    def __init__(self, spec: ProgramSpec, builder: StepBuilder) -> None:
        self.spec = spec
        self._builder = builder
        self._cached = lru_cache(maxsize=64)(self._build)

    def _build(self, rank: int) -> tuple[Step, ...]:
        return tuple(self._builder(self.spec, rank))

    @property
    def n_ranks(self) -> int:
        """Number of ranks in the group."""
        return self.spec.n_ranks

    def steps(self, rank: int) -> Sequence[Step]:
        """The ordered steps of group rank ``rank`` (built once, then cached)."""
        if not 0 <= rank < self.spec.n_ranks:
            raise IndexError(f"rank {rank} outside group of {self.spec.n_ranks}")
        return self._cached(rank)

    def iter_ranks(self) -> Iterator[tuple[int, Sequence[Step]]]:
        """Yield (rank, steps) for every rank, one rank's steps alive at a time."""
        for r in range(self.spec.n_ranks):
            yield r, self._build(r)

    def buffer_bytes(self, rank: int = 0) -> int:
        """Bytes of ``rank``'s working buffer (the same on every rank)."""
        from genie.collectives.layout import buffer_bytes

        return buffer_bytes(self.spec)

    def footprint(self, rank: int) -> tuple[int, int]:
        """(buffer, scratch) bytes group rank ``rank`` holds while it runs this program: the
        working buffer (at least the spec's size and every step's extent) and one scratch area
        per RECV. What an agent allocates and what the controller's memory admission counts."""
        buf = max(self.buffer_bytes(rank), self.spec.size)
        scratch = 0
        for st in self.steps(rank):
            if st.op == Op.RECV:
                scratch += st.nbytes
            else:
                buf = max(buf, st.offset + st.nbytes)
        return buf, scratch

    def input_region(self, rank: int) -> tuple[int, int]:
        """(offset, nbytes) of ``rank``'s buffer that holds its input at the start."""
        from genie.collectives.layout import input_region

        return input_region(self.spec, rank)

    def result_regions(self, rank: int) -> list[tuple[int, int]]:
        """(offset, nbytes) parts of ``rank``'s buffer that hold its result at the end."""
        from genie.collectives.layout import result_regions

        return result_regions(self.spec, rank)

    def to_bytes(self) -> bytes:
        """Serialise the program (its spec) for shipping."""
        return msgspec.msgpack.encode(self.spec)

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"Program({s.collective}/{s.algorithm}, n={s.n_ranks}, size={s.size}, "
            f"chunks={s.chunks})"
        )
