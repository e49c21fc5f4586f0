"""A small builder of per-rank Chakra graphs, shared by the generators.

Nodes get the attrs ASTRA-sim reads, with the kinds it expects: ``is_cpu_op`` bool_val,
``comm_type``/``comm_size`` int64_val, ``comm_src``/``comm_dst``/``comm_tag`` int32_val,
``pg_name`` string_val, ``num_ops``/``tensor_size`` int64_val. Compute durations are whole
microseconds (Chakra's unit), at least 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from genie.errors import UsageError
from genie.workload.loader import member_group_attrs
from genie.workload.model import (
    DEFAULT_GROUP,
    DEFAULT_VERSION,
    Attr,
    CollectiveType,
    Metadata,
    Node,
    NodeType,
    RankGraph,
    Workload,
)

#: H100 SXM dense bf16 peak, FLOP/s.
H100_BF16_FLOPS = 989e12

_CPU = Attr("is_cpu_op", "bool_val", False)


def micros(seconds: float) -> int:
    """Seconds to whole microseconds, at least 1."""
    return max(1, round(seconds * 1e6))


class RankBuilder:
    """Appends nodes to one rank's graph with consecutive ids."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.nodes: list[Node] = []

    def _add(self, name: str, type_: int, deps: Iterable[int | None], attrs: list[Attr], **kw):
        nid = len(self.nodes)
        d = sorted({x for x in deps if x is not None})
        self.nodes.append(Node(nid, name, type_, data_deps=d, attrs=attrs, **kw))
        return nid

    def compute(
        self,
        name: str,
        seconds: float,
        deps: Iterable[int | None] = (),
        *,
        flops: float | None = None,
        tensor_bytes: int | None = None,
    ) -> int:
        """A compute node of ``seconds`` (with num_ops/tensor_size when known); its id."""
        attrs = [_CPU]
        if flops is not None:
            attrs.append(Attr("num_ops", "int64_val", int(flops)))
        if tensor_bytes is not None:
            attrs.append(Attr("tensor_size", "int64_val", int(tensor_bytes)))
        return self._add(name, NodeType.COMP_NODE, deps, attrs, duration_micros=micros(seconds))

    def collective(
        self,
        name: str,
        ctype: CollectiveType,
        size: int,
        deps: Iterable[int | None] = (),
        pg: str = DEFAULT_GROUP,
        splits: list[int] | None = None,
    ) -> int:
        """A COMM_COLL node of ``size`` bytes in process group ``pg``; its id. ``splits``: an
        uneven all-to-all's bytes to each rank of the group (``comm_split_sizes``)."""
        attrs = [
            _CPU,
            Attr("comm_type", "int64_val", int(ctype)),
            Attr("comm_size", "int64_val", int(size)),
        ]
        if pg:
            attrs.append(Attr("pg_name", "string_val", pg))
        if splits is not None:
            attrs.append(Attr("comm_split_sizes", "int64_list", [int(x) for x in splits]))
        return self._add(name, NodeType.COMM_COLL_NODE, deps, attrs)

    def send(self, name: str, dst: int, size: int, tag: int, deps=()) -> int:
        """A COMM_SEND node to rank ``dst``; its id."""
        return self._p2p(name, NodeType.COMM_SEND_NODE, self.rank, dst, size, tag, deps)

    def recv(self, name: str, src: int, size: int, tag: int, deps=()) -> int:
        """A COMM_RECV node from rank ``src``; its id."""
        return self._p2p(name, NodeType.COMM_RECV_NODE, src, self.rank, size, tag, deps)

    def _p2p(self, name, type_, src, dst, size, tag, deps) -> int:
        attrs = [
            _CPU,
            Attr("comm_src", "int32_val", int(src)),
            Attr("comm_dst", "int32_val", int(dst)),
            Attr("comm_tag", "int32_val", int(tag)),
            Attr("comm_size", "int64_val", int(size)),
        ]
        return self._add(name, type_, deps, attrs)


def finish(
    name: str,
    builders: list[RankBuilder],
    groups: dict[str, tuple[int, ...]] | None = None,
    params: Mapping[str, object] | None = None,
) -> Workload:
    """Turn rank builders into a Workload whose metadata records groups and parameters (each
    rank's file the groups it belongs to)."""
    groups = dict(groups or {})
    desc = ", ".join(f"{k}={v}" for k, v in (params or {}).items())
    generator = Attr("generator", "string_val", f"genie {name}" + (f" ({desc})" if desc else ""))
    own = member_group_attrs(groups, max((b.rank for b in builders), default=-1) + 1)
    ranks = []
    for b in builders:
        attrs = [generator, *own[b.rank]]
        ranks.append(RankGraph(b.rank, b.nodes, Metadata(DEFAULT_VERSION, attrs)))
    return Workload(ranks=ranks, groups=groups, name=name)


def need(cond: bool, msg: str) -> None:
    """Raise UsageError(msg) unless ``cond``."""
    if not cond:
        raise UsageError(msg)
