"""Chakra's ET protobuf schema (``ChakraProtoMsg``), built in Python at import time.

No ``protoc`` is needed: the descriptors are assembled from the field list of Chakra's
``et_def.proto`` with ``descriptor_pb2`` and turned into message classes by ``message_factory``.
Besides Chakra's messages, ``NodeStream`` (``repeated Node nodes = 1``) lets the reader parse a
whole stream of nodes in one call to the C (upb) parser.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"

# (value field name, field number, list message name, protobuf scalar type); lists use number + 1.
_F = descriptor_pb2.FieldDescriptorProto
SCALAR_KINDS: list[tuple[str, int, str, int]] = [
    ("double", 3, "DoubleList", _F.TYPE_DOUBLE),
    ("float", 5, "FloatList", _F.TYPE_FLOAT),
    ("int32", 7, "Int32List", _F.TYPE_INT32),
    ("int64", 9, "Int64List", _F.TYPE_INT64),
    ("uint32", 11, "Uint32List", _F.TYPE_UINT32),
    ("uint64", 13, "Uint64List", _F.TYPE_UINT64),
    ("sint32", 15, "Sint32List", _F.TYPE_SINT32),
    ("sint64", 17, "Sint64List", _F.TYPE_SINT64),
    ("fixed32", 19, "Fixed32List", _F.TYPE_FIXED32),
    ("fixed64", 21, "Fixed64List", _F.TYPE_FIXED64),
    ("sfixed32", 23, "Sfixed32List", _F.TYPE_SFIXED32),
    ("sfixed64", 25, "Sfixed64List", _F.TYPE_SFIXED64),
    ("bool", 27, "BoolList", _F.TYPE_BOOL),
    ("string", 29, "StringList", _F.TYPE_STRING),
    ("bytes", 31, "BytesList", _F.TYPE_BYTES),
]

NODE_TYPES = [
    "INVALID_NODE",
    "METADATA_NODE",
    "MEM_LOAD_NODE",
    "MEM_STORE_NODE",
    "COMP_NODE",
    "COMM_SEND_NODE",
    "COMM_RECV_NODE",
    "COMM_COLL_NODE",
]
COLLECTIVE_TYPES = [
    "ALL_REDUCE",
    "REDUCE",
    "ALL_GATHER",
    "GATHER",
    "SCATTER",
    "BROADCAST",
    "ALL_TO_ALL",
    "REDUCE_SCATTER",
    "REDUCE_SCATTER_BLOCK",
    "BARRIER",
]


def _field(msg, name, number, ftype, label=_F.LABEL_OPTIONAL, type_name=None, oneof=None):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = f".{PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof
    return f


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="genie_chakra_et_def.proto", package=PACKAGE, syntax="proto3"
    )
    rep = _F.LABEL_REPEATED
    for _kind, _num, list_name, ftype in SCALAR_KINDS:
        m = fd.message_type.add(name=list_name)
        _field(m, "values", 1, ftype, rep)
    attr = fd.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    for kind, num, list_name, ftype in SCALAR_KINDS:
        _field(attr, f"{kind}_val", num, ftype, oneof=0)
        _field(attr, f"{kind}_list", num + 1, _F.TYPE_MESSAGE, type_name=list_name, oneof=0)
    gm = fd.message_type.add(name="GlobalMetadata")
    _field(gm, "version", 1, _F.TYPE_STRING)
    _field(gm, "attr", 2, _F.TYPE_MESSAGE, rep, "AttributeProto")
    io = fd.message_type.add(name="IOInfo")
    _field(io, "values", 1, _F.TYPE_STRING)
    _field(io, "shapes", 2, _F.TYPE_STRING)
    _field(io, "types", 3, _F.TYPE_STRING)
    node = fd.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, _F.TYPE_ENUM, type_name="NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, rep)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, rep)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, rep, "AttributeProto")
    stream = fd.message_type.add(name="NodeStream")
    _field(stream, "nodes", 1, _F.TYPE_MESSAGE, rep, "Node")
    nt = fd.enum_type.add(name="NodeType")
    for i, n in enumerate(NODE_TYPES):
        nt.value.add(name=n, number=i)
    ct = fd.enum_type.add(name="CollectiveCommType")
    for i, n in enumerate(COLLECTIVE_TYPES):
        ct.value.add(name=n, number=i)
    return fd


_POOL = descriptor_pool.DescriptorPool()
_FILE = _POOL.Add(_build_file())


def _cls(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


AttributeProto = _cls("AttributeProto")
GlobalMetadata = _cls("GlobalMetadata")
IOInfo = _cls("IOInfo")
Node = _cls("Node")
NodeStream = _cls("NodeStream")
