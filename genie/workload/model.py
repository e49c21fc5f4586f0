"""The workload model: N ranks, each an ordered DAG of typed Chakra nodes.

A ``Node`` keeps every raw Chakra field (attrs in file order with their protobuf value kind) so
a read-then-write is byte-identical, and exposes the fields the simulator needs, computed once
from the attrs: ``kind``, ``duration_s``, ``comm_type``, ``comm_size``, ``pg_name``, ``peer``,
``tag``, ``num_ops``, ``tensor_size``, ``is_cpu_op``, ``stream``. Change attrs with
``Node.set_attr`` so those stay in step.

Host work: PyTorch-derived traces (Chakra's converter) hold the host-side launcher of every
collective (``c10d::allreduce_``, ``record_param_comms``, older converters' ``nccl:*``) as a
COMM node with ``is_cpu_op`` true and without what the network needs (``comm_type`` for a
collective, the peer for a send/recv); the GPU kernel (``ncclDevKernel_*``) that follows is the
real collective. Such a node's kind is ``NodeKind.HOST``: CPU time of its duration, never a
network operation (and never an all-reduce, which ``comm_type`` 0 would mean).

Process groups: ``Workload.groups`` maps a group name to a tuple of global ranks; the name ``""``
(a node without ``pg_name``) is the default group of all ranks. See ``genie.workload.loader``
for how groups are stored on disk.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from genie.errors import ValidationError
from genie.vocabulary import CollectiveType

DEFAULT_VERSION = "0.0.4"
DEFAULT_GROUP = ""


class NodeType(enum.IntEnum):
    """Chakra's NodeType enum, with its numbering."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class NodeKind(enum.Enum):
    """What a node does, as the simulator sees it."""

    COMPUTE = "compute"
    COLLECTIVE = "collective"
    SEND = "send"
    RECV = "recv"
    MEMORY = "memory"
    HOST = "host"  # host-side launcher of a GPU communication kernel: CPU work
    OTHER = "other"


KIND_OF_TYPE: dict[int, NodeKind] = {
    NodeType.COMP_NODE: NodeKind.COMPUTE,
    NodeType.COMM_COLL_NODE: NodeKind.COLLECTIVE,
    NodeType.COMM_SEND_NODE: NodeKind.SEND,
    NodeType.COMM_RECV_NODE: NodeKind.RECV,
    NodeType.MEM_LOAD_NODE: NodeKind.MEMORY,
    NodeType.MEM_STORE_NODE: NodeKind.MEMORY,
}

SCALAR_KINDS = (
    "double",
    "float",
    "int32",
    "int64",
    "uint32",
    "uint64",
    "sint32",
    "sint64",
    "fixed32",
    "fixed64",
    "sfixed32",
    "sfixed64",
    "bool",
    "string",
    "bytes",
)
#: Every AttributeProto value kind, named as its protobuf oneof field.
VALUE_KINDS = tuple(f"{k}_val" for k in SCALAR_KINDS) + tuple(f"{k}_list" for k in SCALAR_KINDS)


class Attr(NamedTuple):
    """One Chakra AttributeProto: ``kind`` is the oneof field name (``int64_val``...) or None."""

    name: str
    kind: str | None
    value: Any
    doc_string: str = ""


@dataclass(slots=True)
class IOInfo:
    """Chakra's IOInfo (inputs/outputs of a node): three strings."""

    values: str = ""
    shapes: str = ""
    types: str = ""


#: attr name -> index in a Node's derived tuple
DERIVED_INDEX = {
    "comm_type": 0,
    "comm_size": 1,
    "pg_name": 2,
    "comm_tag": 3,
    "num_ops": 4,
    "tensor_size": 5,
    "comm_src": 6,
    "comm_dst": 7,
    "is_cpu_op": 8,
    "stream": 9,
}
#: a Node's derived fields, indexed as DERIVED_INDEX: raw attr values (checked by validate)
Derived = tuple[Any, ...]
NO_DERIVED: Derived = (None, None, DEFAULT_GROUP, None, None, None, None, None, None, None)
#: derived slot that a COMM node of each type needs for the network (comm_type, comm_dst, comm_src)
_NET_SLOT: dict[int, int] = {
    NodeType.COMM_COLL_NODE: 0,
    NodeType.COMM_SEND_NODE: 7,
    NodeType.COMM_RECV_NODE: 6,
}


def is_host_work(type_: int, derived: Derived) -> bool:
    """True for a COMM node marked ``is_cpu_op`` that lacks its network fields (see above)."""
    slot = _NET_SLOT.get(type_)
    return slot is not None and bool(derived[8]) and derived[slot] is None


class Node:
    """One Chakra node: raw fields for round trip plus the derived fields the simulator reads."""

    __slots__ = (
        "_attrs",
        "_d",
        "_inputs",
        "_outputs",
        "ctrl_deps",
        "data_deps",
        "duration_micros",
        "id",
        "name",
        "raw_ctrl_deps",
        "start_time_micros",
        "type",
    )

    def __init__(
        self,
        id: int,
        name: str = "",
        type: int = NodeType.INVALID_NODE,
        *,
        data_deps: list[int] | None = None,
        ctrl_deps: list[int] | None = None,
        start_time_micros: int = 0,
        duration_micros: int = 0,
        inputs: IOInfo | None = None,
        outputs: IOInfo | None = None,
        attrs: list[Attr] | None = None,
    ) -> None:
        self.id = id
        self.name = name
        self.type = type
        self.data_deps = data_deps if data_deps is not None else []
        self.raw_ctrl_deps = ctrl_deps if ctrl_deps is not None else []
        self.ctrl_deps = self.raw_ctrl_deps
        self.start_time_micros = start_time_micros
        self.duration_micros = duration_micros
        self._inputs: IOInfo | bytes | None = inputs
        self._outputs: IOInfo | bytes | None = outputs
        self._attrs: list[Attr] | bytes = attrs if attrs is not None else []
        self.refresh()

    @property
    def attrs(self) -> list[Attr]:
        """The attrs in file order (a reader may keep them as their canonical bytes until now)."""
        a = self._attrs
        if type(a) is bytes:
            from genie.workload.et_fast import decode_attr_section

            a = self._attrs = decode_attr_section(a)
        return a  # type: ignore[return-value]

    @attrs.setter
    def attrs(self, value: list[Attr]) -> None:
        self._attrs = value

    @property
    def inputs(self) -> IOInfo | None:
        """Chakra's inputs IOInfo, or None (a reader may keep it as checked bytes until now)."""
        io = self._inputs
        if type(io) is bytes:
            from genie.workload.et_fast import decode_io

            io = self._inputs = decode_io(io)
        return io  # type: ignore[return-value]

    @inputs.setter
    def inputs(self, value: IOInfo | None) -> None:
        self._inputs = value

    @property
    def outputs(self) -> IOInfo | None:
        """Chakra's outputs IOInfo, or None (a reader may keep it as checked bytes until now)."""
        io = self._outputs
        if type(io) is bytes:
            from genie.workload.et_fast import decode_io

            io = self._outputs = decode_io(io)
        return io  # type: ignore[return-value]

    @outputs.setter
    def outputs(self, value: IOInfo | None) -> None:
        self._outputs = value

    def refresh(self) -> None:
        """Recompute the derived fields from ``attrs`` (the last attr of a name wins)."""
        d: list[Any] = list(NO_DERIVED)
        for a in self.attrs:
            i = DERIVED_INDEX.get(a.name)
            if i is not None:
                d[i] = a.value
        if d[2] is None:
            d[2] = DEFAULT_GROUP
        self._d: Derived = tuple(d)

    comm_type = property(lambda self: self._d[0], doc="Collective type number (attr comm_type).")
    comm_size = property(lambda self: self._d[1], doc="Bytes communicated (attr comm_size).")
    pg_name = property(lambda self: self._d[2], doc="Process group name ('' = all ranks).")
    tag = property(lambda self: self._d[3], doc="Send/recv tag (attr comm_tag).")
    num_ops = property(lambda self: self._d[4], doc="Compute operations (attr num_ops).")
    tensor_size = property(lambda self: self._d[5], doc="Bytes touched (attr tensor_size).")
    comm_src = property(lambda self: self._d[6], doc="Source rank of a recv (attr comm_src).")
    comm_dst = property(lambda self: self._d[7], doc="Destination rank of a send (comm_dst).")
    stream = property(lambda self: self._d[9], doc="GPU stream of the node (attr stream) or None.")

    @property
    def is_cpu_op(self) -> bool:
        """Whether the node runs on the host CPU (attr ``is_cpu_op``; bool or int; default no)."""
        return bool(self._d[8])

    @property
    def kind(self) -> NodeKind:
        """The node's kind (compute, collective, send, recv, memory, host, other)."""
        t = self.type
        if t in _NET_SLOT and is_host_work(t, self._d):
            return NodeKind.HOST
        return KIND_OF_TYPE.get(t, NodeKind.OTHER)

    @property
    def duration_s(self) -> float:
        """Duration in seconds (Chakra stores whole microseconds)."""
        return self.duration_micros * 1e-6

    @property
    def collective(self) -> CollectiveType | None:
        """The collective type as an enum, or None when ``comm_type`` is absent or unknown."""
        try:
            return CollectiveType(self.comm_type) if self.comm_type is not None else None
        except ValueError:
            return None

    @property
    def peer(self) -> int | None:
        """The other rank of a send (``comm_dst``) or recv (``comm_src``)."""
        if self.type == NodeType.COMM_SEND_NODE:
            return self.comm_dst
        if self.type == NodeType.COMM_RECV_NODE:
            return self.comm_src
        return None

    def attr(self, name: str, default: Any = None) -> Any:
        """The value of the last attr called ``name``, or ``default``."""
        for a in reversed(self.attrs):
            if a.name == name:
                return a.value
        return default

    def set_attr(self, name: str, kind: str, value: Any) -> None:
        """Set (replace or append) an attr and refresh the derived fields."""
        if kind not in VALUE_KINDS:
            raise ValidationError(f"unknown attribute value kind {kind!r} for {name!r}")
        new = Attr(name, kind, value)
        for i, a in enumerate(self.attrs):
            if a.name == name:
                self.attrs[i] = new
                break
        else:
            self.attrs.append(new)
        self.refresh()

    def copy(self) -> Node:
        """A node equal to this one whose lists can change without touching this one's."""
        n = Node.__new__(Node)
        n.id, n.name, n.type, n._d = self.id, self.name, self.type, self._d
        n.start_time_micros, n.duration_micros = self.start_time_micros, self.duration_micros
        n.data_deps, n.raw_ctrl_deps = list(self.data_deps), list(self.raw_ctrl_deps)
        c = self.ctrl_deps
        n.ctrl_deps = n.raw_ctrl_deps if c is self.raw_ctrl_deps else list(c)
        a = self._attrs
        n._attrs = list(a) if type(a) is list else a
        n._inputs, n._outputs = self._inputs, self._outputs
        return n

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in _COMPARED)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Node(id={self.id}, name={self.name!r}, type={NodeType(self.type).name})"

    def label(self) -> str:
        """A short human name: ``id 12 'layer3.fwd'``."""
        return f"id {self.id} {self.name!r}" if self.name else f"id {self.id}"


#: what ``Node.__eq__`` compares: every raw field (attrs decoded), not the derived tuple
_COMPARED = tuple(s.lstrip("_") for s in Node.__slots__ if s != "_d")


@dataclass
class Metadata:
    """Chakra's GlobalMetadata: the version string and attrs."""

    version: str = DEFAULT_VERSION
    attrs: list[Attr] = field(default_factory=list)
    #: the attrs as the reader's memo shares them between ranks with the same metadata frame
    #: (genie.workload.et_codec sets it; the loader tells such ranks apart by it), else None
    template: tuple[Attr, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def attr(self, name: str, default: Any = None) -> Any:
        """The value of the last attr called ``name``, or ``default``."""
        for a in reversed(self.attrs):
            if a.name == name:
                return a.value
        return default


@dataclass
class RankGraph:
    """One rank's trace: metadata, nodes in file order, and an id index."""

    rank: int
    nodes: list[Node]
    metadata: Metadata = field(default_factory=Metadata)
    source: str = ""

    def __post_init__(self) -> None:
        self._by_id: dict[int, Node] | None = None
        self._indexed = -1

    @property
    def by_id(self) -> dict[int, Node]:
        """Nodes keyed by id (rebuilt when the node list changed length; first duplicate wins)."""
        if self._by_id is None or self._indexed != len(self.nodes):
            idx: dict[int, Node] = {}
            for n in reversed(self.nodes):
                idx[n.id] = n
            self._by_id = idx
            self._indexed = len(self.nodes)
        return self._by_id

    def topological_order(self) -> list[Node]:
        """Nodes ordered so each comes after its data_deps (stable on file order)."""
        from genie.workload.graph import topological_order

        return topological_order(self)


@dataclass
class Workload:
    """A workload of ``n_ranks`` ranks, process groups, and the non-fatal problems found.

    ``dropped`` counts the dependencies validation set aside, by reason (summed over ranks;
    keys in ``genie.workload.validate.DROP_REASONS``). ``group_desc`` holds readable names of
    groups whose pg_name is a number (``genie.workload.astra``, PyTorch's ``pg_desc``).
    """

    ranks: list[RankGraph]
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    name: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    group_desc: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.groups.setdefault(DEFAULT_GROUP, tuple(range(len(self.ranks))))

    @property
    def n_ranks(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def group(self, pg_name: str | None) -> tuple[int, ...]:
        """The global ranks of a process group (the default group for ``""``/None)."""
        key = pg_name or DEFAULT_GROUP
        if key not in self.groups:
            raise ValidationError(
                f"process group {key!r} is used but its members are unknown "
                f"(known: {sorted(self.groups)})"
            )
        return self.groups[key]

    def node_count(self) -> int:
        """Total nodes over all ranks."""
        return sum(len(r.nodes) for r in self.ranks)
