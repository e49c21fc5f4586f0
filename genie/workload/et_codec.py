"""Read and write Chakra ``.et`` files: a stream of varint32-length-prefixed protobuf messages.

The first message is a ``GlobalMetadata``, each later one a ``Node``. Reading uses the
hand-written decoder of ``et_fast`` (protobuf's Python objects cost ~20 us per node to unpack);
any frame it does not expect goes to protobuf's parser, and a frame that parser rejects is a
TraceFormatError naming the file and byte offset. Writing uses this module's own encoder, which
emits protobuf's canonical bytes (fields in number order, proto3 defaults omitted, oneof values
always present, scalar lists packed). Tests cross-check both directions against protobuf
(``decode_trace_protobuf`` is the reference reader). gzip input (``.et.gz`` or gzip magic) is
read transparently.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from genie.errors import TraceFormatError, WorkloadError
from genie.workload import et_fast
from genie.workload.model import DEFAULT_VERSION, Attr, IOInfo, Metadata, Node

if TYPE_CHECKING:
    from genie.workload.et_columns import NodeColumns

GZIP_MAGIC = b"\x1f\x8b"
#: node bytes from which a file is decoded in columns (``et_columns``: numpy passes over every
#: frame; below this, ``et_fast``'s frame-by-frame loop costs less than numpy's set-up)
COLUMNS_FROM_BYTES = 1 << 15
_INTERNER = "et_columns.Interner"  # its key in a workload's read memo (beside metadata bytes)
_NODE_MEMO = "et_fast.DecodeMemo"  # the same for the frame-by-frame decoder's memo


# ----------------------------------------------------------------------------- framing


def split_frames(data: bytes, source: str) -> list[tuple[int, int, int]]:
    """Return ``(frame_offset, body_start, body_end)`` for every frame; raise on truncation."""
    frames: list[tuple[int, int, int]] = []
    append = frames.append
    pos = 0
    end = len(data)
    while pos < end:
        b = data[pos]
        if b < 0x80:
            start = pos + 1
            length = b
        else:
            length = 0
            shift = 0
            p = pos
            while True:
                if p >= end:
                    raise TraceFormatError(
                        f"{source}: truncated frame length at byte offset {pos} (file ends)"
                    )
                if shift > 28:
                    raise TraceFormatError(
                        f"{source}: corrupt frame length at byte offset {pos} (varint too long)"
                    )
                b = data[p]
                length |= (b & 0x7F) << shift
                p += 1
                shift += 7
                if b < 0x80:
                    break
            start = p
        stop = start + length
        if stop > end:
            raise TraceFormatError(
                f"{source}: truncated frame at byte offset {pos}: needs {length} bytes, "
                f"{end - start} left"
            )
        append((pos, start, stop))
        pos = stop
    return frames


def _read_file(path: Path) -> bytes:
    """A file's bytes: one ``read`` of its size where it is under 1 GiB (a rank file read
    through ``Path.read_bytes`` costs twice the system calls and a buffered reader)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size >= 1 << 30:
            with open(fd, "rb", buffering=0, closefd=False) as f:
                return f.readall()
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data  # a short read of a regular file: its end
        rest = [data]  # it grew since fstat: read on to its end
        while chunk := os.read(fd, 1 << 20):
            rest.append(chunk)
        return b"".join(rest)
    finally:
        os.close(fd)


def open_bytes(path: Path) -> tuple[bytes, str]:
    """Read a file, decompressing gzip; return the bytes and a note for offsets."""
    try:
        raw = _read_file(path)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw), " (offset in the decompressed stream)"
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{path}: corrupt gzip data: {exc}") from None
    return raw, ""


# ----------------------------------------------------------------------------- decoding


def _attrs_from(pb_attrs) -> list[Attr]:
    out = []
    for a in pb_attrs:
        k = a.WhichOneof("value")
        if k is None:
            v = None
        elif k[-1] == "t":  # *_list
            v = list(getattr(a, k).values)
        else:
            v = getattr(a, k)
        out.append(Attr(a.name, k, v, a.doc_string))
    return out


def _io_from(pb) -> IOInfo:
    return IOInfo(pb.values, pb.shapes, pb.types)


def _nodes_from_stream(pb_nodes) -> list[Node]:
    """Turn parsed protobuf Node messages into model Nodes."""
    return [et_fast.node_from_pb(m) for m in pb_nodes]


def decode_trace(data: bytes, source: str = "<bytes>") -> tuple[Metadata, list[Node], list[str]]:
    """Decode a whole ET byte stream into metadata, nodes and the problems noticed."""
    return _decode(data, source, "")


def _first_frame(
    data: bytes, source: str, note: str, memo: dict | None = None
) -> tuple[Metadata, int, list[str]]:
    """Decode the GlobalMetadata frame; return it, the offset after it and problems.

    ``memo`` (bytes of a frame -> what they decoded to) lets the ranks of one workload, whose
    metadata frames are usually the same bytes, decode them once; each rank still gets its own
    ``Metadata`` and attrs list (the Attr values are shared).
    """
    if not data:
        raise TraceFormatError(f"{source}: empty file (no GlobalMetadata frame)")
    pos = 0
    ln = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise TraceFormatError(f"{source}: truncated frame length at byte offset 0{note}")
        b = data[pos]
        pos += 1
        ln |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    end = pos + ln
    if end > len(data):
        raise TraceFormatError(
            f"{source}: truncated frame at byte offset 0{note}: needs {ln} bytes, "
            f"{len(data) - pos} left"
        )
    raw = data[pos:end]
    hit = memo.get(raw) if memo is not None else None
    if hit is None and memo is not None:
        hit = _metadata_by_attr(raw, memo)
    if hit is None:
        from genie.workload import et_schema  # protobuf: only where it reads

        gm = et_schema.GlobalMetadata()
        try:
            gm.ParseFromString(raw)
        except DecodeError as exc:
            raise TraceFormatError(
                f"{source}: corrupt GlobalMetadata frame at byte offset 0{note}: {exc}"
            ) from None
        # canonical bytes are what protobuf itself writes without unknown fields (and what
        # encode_metadata writes: tests check), so its C serializer tells, once per content
        gm.DiscardUnknownFields()
        hit = (gm.version, tuple(_attrs_from(gm.attr)), gm.SerializeToString() != raw)
        if memo is not None and len(memo) < 64:
            memo[raw] = hit
    version, attrs, odd = hit
    meta = Metadata(version, list(attrs))
    meta.template = attrs  # ranks with the same frame share it (the loader reads it once)
    problems = []
    if ln == 0:
        problems.append(
            f"{source}: GlobalMetadata frame is empty; Chakra's reader stops at a zero-length frame"
        )
    elif odd:
        problems.append(
            f"{source}: GlobalMetadata has non-canonical bytes or unknown fields; "
            "a re-write will not be byte-identical"
        )
    return meta, end, problems


_META_ATTRS = "et_codec.MetadataAttrs"  # its key in a workload's read memo


class MetadataAttrs:
    """Decoded GlobalMetadata attr bodies by their bytes, shared by one workload's reads;
    bounded (``max_entries`` bodies, ``max_bytes`` bytes of them: then it starts over)."""

    def __init__(self, max_entries: int = 1 << 16, max_bytes: int = 64 << 20) -> None:
        self.attrs: dict[bytes, Attr] = {}
        self.held = 0  # bytes of the keys
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    def get(self, body: bytes) -> Attr | None:
        """The attr that a canonical body decodes to; None where protobuf would not write
        ``body`` so (unknown fields, other forms); DecodeError where protobuf rejects it."""
        a = self.attrs.get(body)
        if a is None:
            a = _canonical_attr(body)
            if a is None:
                from genie.workload import et_schema  # protobuf: only where it reads

                pb = et_schema.AttributeProto()
                pb.ParseFromString(body)
                pb.DiscardUnknownFields()
                if pb.SerializeToString() != body:
                    return None
                a = _attrs_from((pb,))[0]
            if len(self.attrs) >= self.max_entries or self.held + len(body) > self.max_bytes:
                self.attrs.clear()
                self.held = 0
            self.attrs[body] = a
            self.held += len(body)
        return a


_INT64_LIST_TAG = 0x52  # AttributeProto field 10 (int64_list), length-delimited


def _canonical_attr(body: bytes) -> Attr | None:
    """The attr of ``body`` where it is canonical and a scalar or an int64 list (process groups'
    members), read without protobuf; None otherwise (protobuf then reads it).

    A scalar is read by ``et_fast``'s canonical-only decoder; a list is taken only where
    ``encode_attr`` writes its reading back as ``body`` byte for byte (so protobuf, which
    reads what that encoder writes as what it was given, reads it the same).
    """
    try:
        pos = 0
        end = len(body)
        name = doc = ""
        if pos < end and body[pos] == 0x0A:
            pos, stop = _field_span(body, pos + 1, end)
            name = body[pos:stop].decode("utf-8")
            pos = stop
        if pos < end and body[pos] == 0x12:
            pos, stop = _field_span(body, pos + 1, end)
            doc = body[pos:stop].decode("utf-8")
            pos = stop
        if pos >= end or body[pos] != _INT64_LIST_TAG:
            try:
                return et_fast.decode_canonical_attr(body)
            except (et_fast._Fallback, struct.error):
                return None
        pos, stop = _field_span(body, pos + 1, end)
        if stop != end:
            return None
        values: list[int] = []
        if pos < stop:
            if body[pos] != 0x0A:
                return None
            pos, vend = _field_span(body, pos + 1, stop)
            if vend != stop:
                return None
            while pos < vend:
                v, pos = et_fast._varint(body, pos)
                values.append(v - _U64 if v >= 1 << 63 else v)
            if pos != vend:
                return None
        a = Attr(name, "int64_list", values, doc)
        if encode_attr(a) != body:
            return None
    except (et_fast._Fallback, IndexError, UnicodeDecodeError, WorkloadError):
        return None
    return a


def _metadata_by_attr(raw: bytes, memo: dict) -> tuple[str, tuple[Attr, ...], bool] | None:
    """What a canonical GlobalMetadata frame ``raw`` decodes to, each attr body decoded once
    per workload (``memo``); None where the frame is not in canonical form, for protobuf's
    parser to read (and judge) as a whole.

    Ranks' metadata frames differ (each names its own process groups) but share most attrs
    (the members of a group are in every member's file): those become the same Attr objects,
    as ranks with equal frames already share theirs. Canonical: the version first, when not
    empty, then the attr fields, lengths in shortest form, every attr body what protobuf
    writes for it; so the frame is what protobuf writes, and reads as protobuf reads it.
    """
    known = memo.get(_META_ATTRS)
    if known is None:
        known = memo[_META_ATTRS] = MetadataAttrs()
    try:
        pos = 0
        end = len(raw)
        version = ""
        if end and raw[0] == 0x0A:
            pos, stop = _field_span(raw, 1, end)
            version = raw[pos:stop].decode("utf-8")
            if not version:
                return None  # an empty version is not written
            pos = stop
        attrs = []
        while pos < end:
            if raw[pos] != 0x12:
                return None  # an unknown or out-of-order field
            pos, stop = _field_span(raw, pos + 1, end)
            a = known.get(raw[pos:stop])
            if a is None:
                return None
            attrs.append(a)
            pos = stop
    except (IndexError, UnicodeDecodeError, DecodeError):
        return None
    return version, tuple(attrs), False


def _field_span(raw: bytes, pos: int, end: int) -> tuple[int, int]:
    """The body span of a length-delimited field whose length varint is at ``pos``, the length
    in shortest form and within ``end``; IndexError otherwise."""
    ln = 0
    shift = 0
    start = pos
    while True:
        b = raw[pos]
        pos += 1
        ln |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
        if shift > 28:
            raise IndexError
    if (pos - start > 1 and b == 0) or pos + ln > end:
        raise IndexError
    return pos, pos + ln


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while building many objects (4x faster loads).

    What was built survives the pause in CPython's permanent generation (``gc.freeze``): the
    collector would otherwise walk every object made meanwhile on its first pass afterwards
    (a second per million nodes) only to find them alive. Those objects are still freed by
    reference counting, which is all nodes, attrs and arrays need (they make no cycles).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.enable()


def _decode(
    data: bytes, source: str, note: str, memo: dict | None = None
) -> tuple[Metadata, list[Node], list[str]]:
    meta, nodes, problems, _cols = _decode_columns(data, source, note, memo)
    return meta, nodes, problems


def _decode_columns(
    data: bytes, source: str, note: str, memo: dict | None = None
) -> tuple[Metadata, list[Node], list[str], NodeColumns | None]:
    """``_decode``, plus the columns the nodes were made from (None below the threshold)."""
    meta, pos, problems = _first_frame(data, source, note, memo)
    cols = None
    with gc_paused():
        if len(data) - pos >= COLUMNS_FROM_BYTES:
            from genie.workload.et_columns import decode_columns

            interner = None
            if memo is not None:  # the ranks of one workload share it (names, attrs repeat)
                from genie.workload.et_columns import Interner

                interner = memo.setdefault(_INTERNER, Interner())
            cols = decode_columns(data, pos, source, note, interner)
            nodes, odd, zero = cols.to_nodes(), cols.odd, cols.zero
        else:
            shared = None
            if memo is not None:  # the ranks of one workload share it (node frames repeat)
                shared = memo.get(_NODE_MEMO)
                if shared is None:
                    shared = memo[_NODE_MEMO] = et_fast.DecodeMemo()
            nodes, odd, zero = et_fast.decode_nodes(data, pos, source, note, memo=shared)
    return meta, nodes, problems + frame_notes(source, zero, odd), cols


def node_memo(memo: dict) -> et_fast.DecodeMemo | None:
    """The node decoder's memo in a workload's read memo (None before its first node decode)."""
    return memo.get(_NODE_MEMO)


def frame_notes(source: str, zero: int, odd: int) -> list[str]:
    """Problem lines for zero-length and non-canonical node frames."""
    out = []
    if zero:
        out.append(
            f"{source}: {zero} zero-length node frame(s); Chakra's reader stops at the first"
        )
    if odd:
        out.append(
            f"{source}: {odd} node frame(s) have non-canonical bytes or unknown fields; "
            "a re-write will not be byte-identical"
        )
    return out


def decode_trace_protobuf(data: bytes, source: str = "<bytes>") -> tuple[Metadata, list[Node]]:
    """Reference reader using only protobuf's parser (slow; tests cross-check it)."""
    frames = split_frames(data, source)
    if not frames:
        raise TraceFormatError(f"{source}: empty file (no GlobalMetadata frame)")
    _, s, e = frames[0]
    from genie.workload import et_schema  # protobuf: only where it reads

    gm = et_schema.GlobalMetadata()
    gm.ParseFromString(data[s:e])
    stream = et_schema.NodeStream()
    # Every frame is "varint length + body"; b"\n" (field 1, wire type 2) before each one
    # turns the node frames into the encoding of NodeStream.nodes.
    stream.ParseFromString(b"".join([b"\n" + data[o:e2] for o, _, e2 in frames[1:]]))
    return Metadata(gm.version, _attrs_from(gm.attr)), _nodes_from_stream(stream.nodes)


def read_trace(
    path: str | Path, memo: dict | None = None
) -> tuple[Metadata, list[Node], list[str]]:
    """Read one ``.et`` (or gzip-compressed) file into metadata, nodes and problems.

    ``memo``: a dict shared by the reads of one workload's rank files (see ``_first_frame``).
    """
    p = path if isinstance(path, Path) else Path(path)  # (its str is then kept)
    data, note = open_bytes(p)
    return _decode(data, str(p), note, memo)


def read_trace_columns(
    path: str | Path, memo: dict | None = None
) -> tuple[Metadata, list[Node], list[str], NodeColumns | None]:
    """``read_trace``, plus the columns the nodes were made from (None for a small file)."""
    p = path if isinstance(path, Path) else Path(path)  # (its str is then kept)
    data, note = open_bytes(p)
    return _decode_columns(data, str(p), note, memo)


# ----------------------------------------------------------------------------- encoding

_SMALL = [bytes([i]) for i in range(128)]
_U64 = 1 << 64
_LIMITS = {
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint32": (0, (1 << 32) - 1),
    "uint64": (0, (1 << 64) - 1),
    "sint32": (-(1 << 31), (1 << 31) - 1),
    "sint64": (-(1 << 63), (1 << 63) - 1),
    "fixed32": (0, (1 << 32) - 1),
    "fixed64": (0, (1 << 64) - 1),
    "sfixed32": (-(1 << 31), (1 << 31) - 1),
    "sfixed64": (-(1 << 63), (1 << 63) - 1),
}


def uvarint(v: int) -> bytes:
    """Encode a non-negative int as a protobuf varint."""
    if v < 0x80:
        return _SMALL[v]
    if v < 0x4000:
        return bytes((v & 0x7F | 0x80, v >> 7))
    if v < 0x200000:
        return bytes((v & 0x7F | 0x80, (v >> 7) & 0x7F | 0x80, v >> 14))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _check_int(kind: str, v) -> int:
    lo, hi = _LIMITS[kind]
    if type(v) is bool or not isinstance(v, int) or not lo <= v <= hi:
        raise WorkloadError(f"attribute value {v!r} does not fit protobuf {kind}")
    return v


def _enc_varint_signed(v: int) -> bytes:
    return uvarint(v + _U64 if v < 0 else v)


def _zigzag(v: int, bits: int) -> bytes:
    return uvarint((v << 1) ^ (v >> (bits - 1)))


def _scalar_payload(kind: str, v) -> tuple[int, bytes]:
    """Wire type and encoded bytes of one scalar value of ``kind``."""
    if kind in ("int32", "int64"):
        return 0, _enc_varint_signed(_check_int(kind, v))
    if kind in ("uint32", "uint64"):
        return 0, uvarint(_check_int(kind, v))
    if kind == "sint32":
        return 0, _zigzag(_check_int(kind, v), 32)
    if kind == "sint64":
        return 0, _zigzag(_check_int(kind, v), 64)
    if kind == "bool":
        if not isinstance(v, bool):
            raise WorkloadError(f"attribute value {v!r} is not a bool")
        return 0, _SMALL[1] if v else _SMALL[0]
    if kind == "double":
        return 1, struct.pack("<d", float(v))
    if kind == "float":
        try:  # a value that rounds to the largest float32 (as JSON prints it) fits
            return 5, struct.pack("<f", float(v))
        except OverflowError:
            raise WorkloadError(f"attribute value {v!r} does not fit protobuf float") from None
    if kind == "fixed32":
        return 5, struct.pack("<I", _check_int(kind, v))
    if kind == "sfixed32":
        return 5, struct.pack("<i", _check_int(kind, v))
    if kind == "fixed64":
        return 1, struct.pack("<Q", _check_int(kind, v))
    if kind == "sfixed64":
        return 1, struct.pack("<q", _check_int(kind, v))
    if kind == "string":
        if not isinstance(v, str):
            raise WorkloadError(f"attribute value {v!r} is not a string")
        b = v.encode("utf-8")
        return 2, uvarint(len(b)) + b
    if kind == "bytes":
        if not isinstance(v, bytes | bytearray):
            raise WorkloadError(f"attribute value {v!r} is not bytes")
        return 2, uvarint(len(v)) + bytes(v)
    raise WorkloadError(f"unknown attribute value kind {kind!r}")


_FIELD_NO = et_fast.VALUE_FIELD


def _list_message(kind: str, values) -> bytes:
    """Body of a ``<Kind>List`` message: packed scalars, or repeated strings/bytes."""
    if not values:
        return b""
    if kind in ("string", "bytes"):
        return b"".join(b"\n" + _scalar_payload(kind, v)[1] for v in values)
    payload = b"".join(_scalar_payload(kind, v)[1] for v in values)
    return b"\n" + uvarint(len(payload)) + payload


def _tag(number: int, wire: int) -> bytes:
    return uvarint((number << 3) | wire)


_ATTR_CACHE: dict[tuple[Attr, type], bytes] = {}
_CACHEABLE = (int, bool, str)  # not float: -0.0 == 0.0 would alias; lists are unhashable


_NAME_FIELD: dict[str, bytes] = {}
_I64_MAX = (1 << 63) - 1


def _name_field(name: str) -> bytes:
    b = _NAME_FIELD.get(name)
    if b is None:
        raw = name.encode("utf-8")
        b = b"\n" + uvarint(len(raw)) + raw if raw else b""
        if len(_NAME_FIELD) < 10_000:
            _NAME_FIELD[name] = b
    return b


def encode_attr(a: Attr) -> bytes:
    """Encode one AttributeProto message body."""
    name, kind, value, doc = a
    tv = type(value)
    if tv is int and kind == "int64_val" and not doc and -_I64_MAX - 1 <= value <= _I64_MAX:
        # the common case (num_ops, tensor_size, comm_size...), often unique per node
        return _name_field(name) + b"H" + uvarint(value + _U64 if value < 0 else value)
    cacheable = tv in _CACHEABLE
    if cacheable:
        key = (a, tv)
        hit = _ATTR_CACHE.get(key)
        if hit is not None:
            return hit
    parts = []
    if name:
        b = name.encode("utf-8")
        parts.append(b"\n" + uvarint(len(b)) + b)
    if doc:
        b = doc.encode("utf-8")
        parts.append(b"\x12" + uvarint(len(b)) + b)
    if kind is not None:
        base, _, form = kind.rpartition("_")
        if base not in _FIELD_NO or form not in ("val", "list"):
            raise WorkloadError(f"attribute {name!r}: unknown value kind {kind!r}")
        number = _FIELD_NO[base]
        if form == "val":
            wire, payload = _scalar_payload(base, value)
            parts.append(_tag(number, wire) + payload)
        else:
            if not isinstance(value, list | tuple):
                raise WorkloadError(f"attribute {name!r}: {kind} needs a list, got {value!r}")
            body = _list_message(base, value)
            parts.append(_tag(number + 1, 2) + uvarint(len(body)) + body)
    out = b"".join(parts)
    if cacheable:
        if len(_ATTR_CACHE) > 65536:
            _ATTR_CACHE.clear()
        _ATTR_CACHE[key] = out
    return out


def _string_field(tag: bytes, s: str) -> bytes:
    b = s.encode("utf-8")
    return tag + uvarint(len(b)) + b


def _encode_io(io: IOInfo) -> bytes:
    out = b""
    if io.values:
        out += _string_field(b"\n", io.values)
    if io.shapes:
        out += _string_field(b"\x12", io.shapes)
    if io.types:
        out += _string_field(b"\x1a", io.types)
    return out


def _packed_u64(tag: bytes, values: list[int]) -> bytes:
    try:
        if min(values) < 0 or max(values) >= _U64:
            raise WorkloadError(f"dependency ids must be uint64: {values!r}")
        payload = b"".join([uvarint(v) for v in values])
    except TypeError:
        raise WorkloadError(f"dependency ids must be integers: {values!r}") from None
    return tag + uvarint(len(payload)) + payload


def encode_node(n: Node) -> bytes:
    """Encode one Node message body (no length prefix)."""
    parts = []
    if n.id:
        if n.id < 0 or n.id >= _U64:
            raise WorkloadError(f"node id {n.id} is not a uint64")
        parts.append(b"\x08" + uvarint(n.id))
    if n.name:
        parts.append(_string_field(b"\x12", n.name))
    if n.type:
        parts.append(b"\x18" + _enc_varint_signed(int(n.type)))
    if n.raw_ctrl_deps:
        parts.append(_packed_u64(b"\x22", n.raw_ctrl_deps))
    if n.data_deps:
        parts.append(_packed_u64(b"\x2a", n.data_deps))
    if n.start_time_micros:
        parts.append(b"\x30" + uvarint(n.start_time_micros))
    if n.duration_micros:
        if n.duration_micros < 0:
            raise WorkloadError(f"node {n.label()}: negative duration {n.duration_micros}")
        parts.append(b"\x38" + uvarint(n.duration_micros))
    for tag, io in ((b"\x42", n._inputs), (b"\x4a", n._outputs)):
        if io is not None:
            # bytes: the IOInfo body as read, checked canonical, so encoding is a copy
            b = io if type(io) is bytes else _encode_io(io)  # type: ignore[arg-type]
            parts.append(tag + uvarint(len(b)) + b)
    raw = n._attrs
    if type(raw) is bytes:
        parts.append(raw)  # the attr fields as read: checked canonical, so encoding is a copy
        return b"".join(parts)
    for a in n.attrs:
        b = encode_attr(a)
        parts.append(b"\x52" + uvarint(len(b)) + b)
    return b"".join(parts)


#: encoded attr fields by ``id(attr)``, with the attr kept so its id cannot be reused
AttrMemo = dict[int, tuple[Attr, bytes]]


def encode_metadata(meta: Metadata, memo: AttrMemo | None = None) -> bytes:
    """Encode a GlobalMetadata message body.

    ``memo`` is shared by the writes of one workload: a list attr object that several ranks'
    metadata hold (a process group's members) is encoded once.
    """
    parts = []
    if meta.version:
        parts.append(_string_field(b"\n", meta.version))
    for a in meta.attrs:
        if memo is not None and isinstance(a.value, list):
            hit = memo.get(id(a))
            if hit is None or hit[0] is not a:
                b = encode_attr(a)
                hit = memo[id(a)] = (a, b"\x12" + uvarint(len(b)) + b)
            parts.append(hit[1])
            continue
        b = encode_attr(a)
        parts.append(b"\x12" + uvarint(len(b)) + b)
    return b"".join(parts)


def encode_trace(meta: Metadata, nodes: Iterable[Node], memo: AttrMemo | None = None) -> bytes:
    """Encode metadata and nodes as a whole ET byte stream (``memo``: see encode_metadata)."""
    with gc_paused():
        return _encode_trace(meta, nodes, memo)


def _encode_trace(meta: Metadata, nodes: Iterable[Node], memo: AttrMemo | None = None) -> bytes:
    head = encode_metadata(meta, memo)
    if not head:
        # Chakra's reader stops at a zero-length frame: never write an empty metadata frame.
        head = encode_metadata(Metadata(DEFAULT_VERSION, []))
    out = [uvarint(len(head)), head]
    append = out.append
    for n in nodes:
        b = encode_node(n)
        if not b:
            raise WorkloadError(
                f"node {n.label()} encodes to zero bytes; Chakra's reader would stop there"
            )
        append(uvarint(len(b)))
        append(b)
    return b"".join(out)


def write_trace(
    path: str | Path, meta: Metadata, nodes: Iterable[Node], memo: AttrMemo | None = None
) -> None:
    """Write one ET file (gzip-compressed when the name ends in ``.gz``; ``memo``: see
    encode_metadata)."""
    p = Path(path)
    data = encode_trace(meta, nodes, memo)
    if p.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    try:
        p.write_bytes(data)
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot write: {exc.strerror or exc}") from None
