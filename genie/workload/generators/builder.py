"""A small builder of per-rank Chakra graphs, shared by the generators.

Nodes get the attrs ASTRA-sim reads, with the kinds it expects: ``is_cpu_op`` bool_val,
``comm_type``/``comm_size`` int64_val, ``comm_src``/``comm_dst``/``comm_tag`` int32_val,
``pg_name`` string_val, ``num_ops``/``tensor_size`` int64_val. Compute durations are whole
microseconds (Chakra's unit), at least 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

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
    """Appends nodes to one rank's graph with consecutive ids.

    ``protos``, shared by the builders of one workload, holds each node made so far by what it
    was made from: another rank asking for the same node (same id, name, fields, deps) gets a
    copy, its lists its own, instead of a node built and derived again (ranks of one stage
    repeat each other's compute nodes).
    """

    def __init__(self, rank: int, protos: dict | None = None) -> None:
        self.rank = rank
        self.nodes: list[Node] = []
        self.protos = protos

    def _add(
        self,
        key: tuple,
        name: str,
        type_: int,
        deps: Iterable[int | None],
        attrs: Callable[[], list[Attr]],
        micros_: int = 0,
    ) -> int:
        nid = len(self.nodes)
        d = sorted({x for x in deps if x is not None})
        protos = self.protos
        full = (nid, name, type_, *d, None, *key)  # None ends the deps
        proto = None if protos is None else protos.get(full)
        if proto is None:
            proto = Node(nid, name, type_, data_deps=d, attrs=attrs(), duration_micros=micros_)
            if protos is None:
                self.nodes.append(proto)
                return nid
            protos[full] = proto
        node = proto.copy()
        self.nodes.append(node)
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

        def attrs() -> list[Attr]:
            out = [_CPU]
            if ops is not None:
                out.append(Attr("num_ops", "int64_val", ops))
            if tensor_bytes is not None:
                out.append(Attr("tensor_size", "int64_val", int(tensor_bytes)))
            return out

        us = micros(seconds)
        ops = None if flops is None else int(flops)
        key = (us, ops, None if tensor_bytes is None else int(tensor_bytes))
        return self._add(key, name, NodeType.COMP_NODE, deps, attrs, us)

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
        shares = None if splits is None else tuple(int(x) for x in splits)

        def attrs() -> list[Attr]:
            out = [
                _CPU,
                Attr("comm_type", "int64_val", int(ctype)),
                Attr("comm_size", "int64_val", int(size)),
            ]
            if pg:
                out.append(Attr("pg_name", "string_val", pg))
            if shares is not None:
                out.append(Attr("comm_split_sizes", "int64_list", list(shares)))
            return out

        key = (int(ctype), int(size), pg, shares)
        return self._add(key, name, NodeType.COMM_COLL_NODE, deps, attrs)

    def send(self, name: str, dst: int, size: int, tag: int, deps=()) -> int:
        """A COMM_SEND node to rank ``dst``; its id."""
        return self._p2p(name, NodeType.COMM_SEND_NODE, self.rank, dst, size, tag, deps)

    def recv(self, name: str, src: int, size: int, tag: int, deps=()) -> int:
        """A COMM_RECV node from rank ``src``; its id."""
        return self._p2p(name, NodeType.COMM_RECV_NODE, src, self.rank, size, tag, deps)

    def _p2p(self, name, type_, src, dst, size, tag, deps) -> int:
        def attrs() -> list[Attr]:
            return [
                _CPU,
                Attr("comm_src", "int32_val", int(src)),
                Attr("comm_dst", "int32_val", int(dst)),
                Attr("comm_tag", "int32_val", int(tag)),
                Attr("comm_size", "int64_val", int(size)),
            ]

        return self._add((int(src), int(dst), int(size), int(tag)), name, type_, deps, attrs)


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
