"""The read hot path: a hand-written decoder for canonical Chakra Node frames.

Frames are split and decoded in one pass over the bytes. Each AttributeProto body is decoded
once and memoised (real traces repeat the same few attrs on every node); the rank files of one
workload share a ``DecodeMemo`` (``et_memo``) of whole frames and of the fields before the
attrs. Anything this decoder does not expect (unknown or unpacked fields, list attrs, bad
bytes) makes it hand that one frame to protobuf's own parser, so the result is always
protobuf's reading of the frame; a frame protobuf also rejects becomes a TraceFormatError
naming the byte offset.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from genie.errors import TraceFormatError
from genie.workload.et_memo import DecodeMemo
from genie.workload.model import (
    DERIVED_INDEX,
    NO_DERIVED,
    SCALAR_KINDS,
    Attr,
    IOInfo,
    Node,
    NodeType,
)

_SLOT_OF_ATTR = DERIVED_INDEX

_U64 = 1 << 64
_UNPACK_D = struct.Struct("<d").unpack_from
_UNPACK_F = struct.Struct("<f").unpack_from
_UNPACK = {
    "fixed32": struct.Struct("<I").unpack_from,
    "sfixed32": struct.Struct("<i").unpack_from,
    "fixed64": struct.Struct("<Q").unpack_from,
    "sfixed64": struct.Struct("<q").unpack_from,
}
_WIRE_OF = {
    "double": 1,
    "float": 5,
    "fixed32": 5,
    "sfixed32": 5,
    "fixed64": 1,
    "sfixed64": 1,
    "string": 2,
    "bytes": 2,
}
#: scalar kind -> field number of its *_val member (the *_list one follows it): 3, 5, ... in
#: ``model.SCALAR_KINDS`` order, as ``et_schema`` declares them (tests compare the two); the
#: protobuf schema itself is imported only where protobuf reads a frame
VALUE_FIELD = {kind: 3 + 2 * i for i, kind in enumerate(SCALAR_KINDS)}
# field number -> (scalar kind, wire type) for the *_val members of AttributeProto's oneof
_VAL_FIELDS = {num: (kind, _WIRE_OF.get(kind, 0)) for kind, num in VALUE_FIELD.items()}


class _Fallback(Exception):
    """This frame needs protobuf's parser."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A varint at ``pos``: (value, offset after it); _Fallback where it is not protobuf's
    shortest form (a multi-byte varint ending in a zero byte: padded) or passes 64 bits, so
    protobuf's parser reads the frame and the caller counts it as not canonical."""
    v = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            if not b and shift:
                raise _Fallback
            return v, pos
        shift += 7
        if shift > 63:
            raise _Fallback


def _decode_attr(body: bytes) -> Attr:
    """Decode one AttributeProto body with a scalar (or no) value, in canonical form only.

    Canonical is what protobuf (and ``et_codec.encode_attr``) writes: name, then doc string,
    each only when non-empty, then at most one value field, shortest varints, values in range
    for their kind. Anything else raises ``_Fallback`` (protobuf's parser then reads it and the
    caller reports the frame), so a decoded attr re-encodes to ``body`` without encoding it.
    """
    pos = 0
    end = len(body)
    name = doc = ""
    kind = None
    value: int | float | str | bytes | None = None
    last = 0  # the last field number read: fields come once each, ascending
    while pos < end:
        key, pos = _varint(body, pos)
        number = key >> 3
        wire = key & 7
        if number <= last:
            raise _Fallback
        last = number
        if number in (1, 2) and wire == 2:
            ln, pos = _varint(body, pos)
            if not ln or pos + ln > end:
                raise _Fallback  # an empty string is not written; a long one is corrupt
            s = body[pos : pos + ln].decode("utf-8")
            pos += ln
            if number == 1:
                name = s
            else:
                doc = s
            continue
        spec = _VAL_FIELDS.get(number)
        if spec is None or spec[1] != wire or kind is not None:
            raise _Fallback  # a list, an unknown field, a wrong wire type or a second value
        base = spec[0]
        kind = base + "_val"
        if wire == 0:
            v, pos = _varint(body, pos)
            if v >= _U64:
                raise _Fallback
            if base in ("int32", "int64"):
                if base == "int32" and (1 << 31) <= v < _U64 - (1 << 31):
                    raise _Fallback  # not a sign-extended int32
                if v >= 1 << 63:
                    v -= _U64
            elif base in ("sint32", "sint64"):
                if base == "sint32" and v >= 1 << 32:
                    raise _Fallback
                v = (v >> 1) ^ -(v & 1)
            elif base == "bool":
                if v > 1:
                    raise _Fallback
                v = v != 0
            elif base == "uint32" and v >= 1 << 32:
                raise _Fallback
            value = v
        elif wire == 2:
            ln, pos = _varint(body, pos)
            if pos + ln > end:
                raise _Fallback
            raw = body[pos : pos + ln]
            pos += ln
            value = raw.decode("utf-8") if base == "string" else raw
        elif base == "double":
            value = _UNPACK_D(body, pos)[0]
            pos += 8
        elif base == "float":
            value = _UNPACK_F(body, pos)[0]
            pos += 4
        else:
            value = _UNPACK[base](body, pos)[0]
            pos += 8 if wire == 1 else 4
    if pos != end:
        raise _Fallback
    return Attr(name, kind, value, doc)


def decode_canonical_attr(body: bytes) -> Attr:
    """``_decode_attr``: one canonical AttributeProto body with a scalar (or no) value;
    ``_Fallback`` (or IndexError, UnicodeDecodeError, struct.error) for any other body."""
    return _decode_attr(body)


def _attr_from_pb(a) -> Attr:
    k = a.WhichOneof("value")
    if k is None:
        v = None
    elif k.endswith("_list"):
        v = list(getattr(a, k).values)
    else:
        v = getattr(a, k)
    return Attr(a.name, k, v, a.doc_string)


def node_from_pb(m) -> Node:
    n = Node(
        m.id,
        m.name,
        m.type,
        data_deps=list(m.data_deps),
        ctrl_deps=list(m.ctrl_deps),
        start_time_micros=m.start_time_micros,
        duration_micros=m.duration_micros,
        inputs=IOInfo(m.inputs.values, m.inputs.shapes, m.inputs.types)
        if m.HasField("inputs")
        else None,
        outputs=IOInfo(m.outputs.values, m.outputs.shapes, m.outputs.types)
        if m.HasField("outputs")
        else None,
        attrs=[_attr_from_pb(a) for a in m.attr],
    )
    return n


_FAST_INT = {0x48: "int64_val", 0x38: "int32_val", 0x68: "uint64_val", 0x58: "uint32_val"}


class AttrCache:
    """Memo of decoded AttributeProto bodies: bytes -> (Attr, derived-slot index or None)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.memo: dict[bytes, tuple[Attr, int | None]] = {}
        self.names: dict[bytes, tuple[str, int | None]] = {}
        self.limit = limit

    def _fast_int(self, body: bytes) -> tuple[Attr, int | None] | None:
        """Decode the common ``name + one integer varint`` attr without the generic loop."""
        nl = body[1]
        if body[0] != 0x0A or not 0 < nl < 0x80:
            return None
        p = 2 + nl
        end = len(body)
        if p + 1 >= end:
            return None
        kind = _FAST_INT.get(body[p])
        if kind is None:
            return None
        v = 0
        shift = 0
        q = p + 1
        while q < end:
            b = body[q]
            q += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        else:
            return None
        if q != end or (q - p > 2 and body[q - 1] == 0) or shift > 70:
            return None
        if kind == "int64_val":
            if v >= 1 << 63:
                if v >= _U64:
                    return None
                v -= _U64
        elif kind == "int32_val":
            if v >= 1 << 31:
                if not _U64 - (1 << 31) <= v < _U64:
                    return None
                v -= _U64
        elif kind == "uint32_val":
            if v >= 1 << 32:
                return None
        elif v >= _U64:
            return None
        key = body[:p]
        ns = self.names.get(key)
        if ns is None:
            name = body[2:p].decode("utf-8")
            ns = self.names[key] = (name, _SLOT_OF_ATTR.get(name))
        return (tuple.__new__(Attr, (ns[0], kind, v, "")), ns[1])

    def get(self, body: bytes) -> tuple[Attr, int | None]:
        """Decode (or recall) one attr body; lists go through protobuf."""
        hit = self._fast_int(body) if len(body) > 3 else None
        if hit is not None:
            if len(self.memo) >= self.limit:
                self.memo.clear()
            self.memo[body] = hit
            return hit
        try:
            a = _decode_attr(body)  # canonical bytes only: nothing to re-encode to check
        except (_Fallback, IndexError, UnicodeDecodeError, struct.error):
            from genie.workload import et_schema  # protobuf: only where it reads

            pb = et_schema.AttributeProto()
            pb.ParseFromString(body)  # DecodeError propagates
            pb.DiscardUnknownFields()  # protobuf would write them back: not ours to keep
            if pb.SerializeToString() != body:
                raise _Fallback from None  # unknown or non-canonical: decode the whole node
            a = _attr_from_pb(pb)
        hit = (a, _SLOT_OF_ATTR.get(a.name))
        if type(a.value) is not list:
            if len(self.memo) >= self.limit:
                self.memo.clear()
            self.memo[body] = hit
        return hit


_NO_DERIVED = NO_DERIVED
_METADATA = int(NodeType.METADATA_NODE)


def _decode_attr_tail(data: bytes, pos: int, end: int, cache: AttrCache) -> tuple:
    """Decode the run of attr fields (field 10) that ends a canonical node.

    Returns ``(attrs tuple, derived tuple, True when no attr holds a list)``.
    """
    attrs = []
    d = None
    plain = True
    memo = cache.memo
    names = cache.names
    while pos < end:
        if data[pos] != 0x52:
            raise _Fallback  # a lower field after the attrs: not canonical
        b = data[pos + 1]
        if b < 0x80:
            alen = b
            pos += 2
        else:
            alen, pos = _varint(data, pos + 1)
        stop = pos + alen
        if stop > end:
            raise _Fallback
        hit = None
        # "name, then one int64 varint" (num_ops, tensor_size, comm_size): often unique per
        # node, so decoded in place once its name is known, before any memo lookup
        nl = data[pos + 1]
        p = pos + 2 + nl
        if data[pos] == 0x0A and nl < 0x80 and p < stop - 1 and data[p] == 0x48:
            ns = names.get(data[pos:p])
            if ns is not None:
                q = p + 1
                b = data[q]
                if b < 0x80:
                    v = b
                    q += 1
                else:
                    b1 = data[q + 1]
                    if 0 < b1 < 0x80:
                        v = (b & 0x7F) | (b1 << 7)
                        q += 2
                    else:
                        b2 = data[q + 2]
                        if b1 >= 0x80 and 0 < b2 < 0x80:
                            v = (b & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)
                            q += 3
                        elif b1 >= 0x80 and b2 >= 0x80 and 0 < data[q + 3] < 0x80:
                            v = (
                                (b & 0x7F)
                                | ((b1 & 0x7F) << 7)
                                | ((b2 & 0x7F) << 14)
                                | (data[q + 3] << 21)
                            )
                            q += 4
                        else:
                            v, q = _varint(data, q)
                            if data[q - 1] == 0 or v >= 1 << 63:
                                q = -1  # not the plain non-negative case: the generic path
                if q == stop:
                    hit = (tuple.__new__(Attr, (ns[0], "int64_val", v, "")), ns[1])
        if hit is None:
            body = data[pos:stop]
            hit = memo.get(body)
            if hit is None:
                hit = cache.get(body)
        pos = stop
        a = hit[0]
        attrs.append(a)
        i = hit[1]
        if i is not None:
            if d is None:
                d = list(_NO_DERIVED)
            d[i] = a[2]
        if plain and type(a[2]) is list:
            plain = False
    if d is None:
        return tuple(attrs), _NO_DERIVED, plain
    if d[2] is None:
        d[2] = ""
    return tuple(attrs), tuple(d), plain


def _int64_attr(data: bytes, pos: int, stop: int, names: dict) -> tuple[Attr, int | None] | None:
    """The attr body ``data[pos:stop]`` when it is ``known name + one plain int64 varint``.

    Plain: non-negative, shortest form (what ``AttrCache.get`` would accept); None otherwise.
    """
    nl = data[pos + 1]
    p = pos + 2 + nl
    if data[pos] != 0x0A or nl >= 0x80 or p >= stop - 1 or data[p] != 0x48:
        return None
    ns = names.get(data[pos:p])
    if ns is None:
        return None
    v, q = _varint(data, p + 1)
    if q != stop or (q - p > 2 and data[q - 1] == 0) or v >= 1 << 63:
        return None
    return (tuple.__new__(Attr, (ns[0], "int64_val", v, "")), ns[1])


def _one_attr(data: bytes, pos: int, end: int, cache: AttrCache) -> tuple[tuple, int]:
    """Check one attr field at ``pos`` (as ``_decode_attr_tail`` would decode it); return
    ``((Attr, derived slot or None), offset after it)``."""
    if data[pos] != 0x52:
        raise _Fallback  # a lower field after the attrs: not canonical
    b = data[pos + 1]
    if b < 0x80:
        alen = b
        pos += 2
    else:
        alen, pos = _varint(data, pos + 1)
    stop = pos + alen
    if stop > end:
        raise _Fallback
    body = data[pos:stop]
    hit = cache.memo.get(body)
    if hit is None:
        hit = _int64_attr(data, pos, stop, cache.names) if alen > 3 else None
        if hit is None:
            hit = cache.get(body)
    return hit, stop


def _scan_attr_tail(
    data: bytes, pos: int, end: int, cache: AttrCache, rests: dict
) -> tuple[tuple, bool]:
    """Check the run of attr fields that ends a canonical node, as ``_decode_attr_tail`` would
    decode it, without building the attrs; return ``(derived tuple, True when no derived value
    is a list)``. Raises ``_Fallback`` (or what protobuf raises) where decoding would.

    ``rests`` memoises the fields after the first attr (bytes -> their derived ``(slot, value)``
    pairs and ``_derived`` of them): converters put a per-node id first (``rf_id``) and repeat
    the rest.
    """
    pairs: list = []
    # the first attr, most often a per-node id: "known name, plain int64" read in place
    b = data[pos + 1]
    nl = data[pos + 3]
    p = pos + 4 + nl
    stop = pos + 2 + b
    ns = None
    head = data[pos] == 0x52 and b < 0x80 and data[pos + 2] == 0x0A and nl < 0x80
    if head and p < stop - 1 and stop <= end and data[p] == 0x48:
        ns = cache.names.get(data[pos + 2 : p])
    if ns is not None:
        v = data[p + 1]
        if v < 0x80:
            q = p + 2
        else:
            v, q = _varint(data, p + 1)
        if q != stop or (q - p > 2 and data[q - 1] == 0) or v >= 1 << 63:
            ns = None
    if ns is None:
        hit, pos = _one_attr(data, pos, end, cache)
        if hit[1] is not None:
            pairs.append((hit[1], hit[0][2]))
    else:
        pos = stop
        if ns[1] is not None:
            pairs.append((ns[1], v))
    if pos < end:
        key = data[pos:end]
        rest = rests.get(key)
        if rest is None:
            found = []
            while pos < end:
                hit, pos = _one_attr(data, pos, end, cache)
                if hit[1] is not None:
                    found.append((hit[1], hit[0][2]))
            rest = (tuple(found), _derived(found))
            if rest[1][1]:
                if len(rests) >= 100_000:
                    rests.clear()
                rests[key] = rest
        if not pairs:
            return rest[1]  # the first attr sets no derived field: the rest's, memoised
        pairs += rest[0]
    return _derived(pairs)


def _derived(pairs: list) -> tuple[tuple, bool]:
    """The derived tuple of ``(slot, value)`` pairs in attr order (the last of a slot wins),
    and True when no value is a list."""
    if not pairs:
        return _NO_DERIVED, True
    d = list(_NO_DERIVED)
    plain = True
    for i, v in pairs:
        d[i] = v
        if type(v) is list:
            plain = False
    if d[2] is None:
        d[2] = ""
    return tuple(d), plain


_LAZY_CACHE = AttrCache(limit=50_000)


def decode_attr_section(raw: bytes) -> list[Attr]:
    """The attrs of a node's attr fields ``raw`` (canonical bytes a reader checked and kept)."""
    try:
        attrs, _d, plain = _decode_attr_tail(raw, 0, len(raw), _LAZY_CACHE)
    except (_Fallback, IndexError, UnicodeDecodeError, DecodeError, struct.error):
        from genie.workload import et_schema  # protobuf: only where it reads

        m = et_schema.Node()
        m.ParseFromString(raw)  # the attr fields alone are a Node message
        return [_attr_from_pb(a) for a in m.attr]
    if plain:
        return list(attrs)
    return [Attr(a[0], a[1], list(a[2]), a[3]) if type(a[2]) is list else a for a in attrs]


def _packed(data: bytes, pos: int, end: int, out: list[int]) -> int:
    """Decode a packed uint64 list body starting at its length; return the new offset."""
    plen = data[pos]
    if plen < 0x80:
        pos += 1
    else:
        plen, pos = _varint(data, pos)
    stop = pos + plen
    if stop > end or not plen:
        raise _Fallback
    while pos < stop:
        b = data[pos]
        if b < 0x80:  # ids below 2^14 unrolled
            out.append(b)
            pos += 1
            continue
        b1 = data[pos + 1]
        if 0 < b1 < 0x80:
            out.append((b & 0x7F) | (b1 << 7))
            pos += 2
            continue
        v, pos = _varint(data, pos)
        if data[pos - 1] == 0:
            raise _Fallback  # a padded varint (shortest form never ends in a zero byte)
        out.append(v)
    if pos != stop:
        raise _Fallback
    return pos


def _check_io(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    """Check a canonical IOInfo field body (length first): string fields 1..3, ascending, once
    each, non-empty, UTF-8; return its body bytes (for ``decode_io``) and the offset after it."""
    b = data[pos]
    if b < 0x80:
        ln = b
        pos += 1
    else:
        ln, pos = _varint(data, pos)
    stop = pos + ln
    if stop > end:
        raise _Fallback
    start = pos
    last = 0
    short = True  # every string length is one byte (< 0x80): all framing bytes are ASCII
    while pos < stop:
        key = data[pos]
        k = (key >> 3) - 1
        if key & 7 != 2 or not last <= k < 3:
            raise _Fallback  # not a string field 1..3 in ascending order, once each
        b = data[pos + 1]
        if b < 0x80:
            slen = b
            pos += 2
        else:
            short = False
            slen, pos = _varint(data, pos + 1)
        e = pos + slen
        if not slen or e > stop:
            raise _Fallback  # an empty string is not canonical; let protobuf count it
        pos = e
        last = k + 1
    if pos != stop:
        raise _Fallback
    body = data[start:stop]
    if short and not body.isascii():
        # ASCII framing splits valid UTF-8 only between characters: one check for all
        body.decode("utf-8")
    elif not short:
        decode_io(body)  # every string again (lengths of 2+ bytes are rare)
    return body, stop


def decode_io(raw: bytes) -> IOInfo:
    """The IOInfo of a canonical body ``raw`` (what ``_check_io`` returned)."""
    vals = ["", "", ""]
    pos = 0
    end = len(raw)
    while pos < end:
        k = (raw[pos] >> 3) - 1
        slen, pos = _varint(raw, pos + 1)
        vals[k] = raw[pos : pos + slen].decode("utf-8")
        pos += slen
    return IOInfo(vals[0], vals[1], vals[2])


def decode_nodes(
    data: bytes,
    pos: int,
    source: str,
    note: str = "",
    stop: int | None = None,
    memo: DecodeMemo | None = None,
) -> tuple[list[Node], int, int]:
    """Decode every Node frame from ``pos`` to ``stop`` (default: the end of ``data``).

    Returns the nodes, the count of frames whose re-encoding differs (non-canonical bytes or
    unknown fields), and the count of zero-length frames. ``memo``: shared by the decodes of
    one workload's files (``DecodeMemo``); by default one for this call that keeps no frames.
    """
    if memo is None:
        memo = DecodeMemo(max_frames=0)
    out: list[Node] = []
    append = out.append
    new = Node.__new__
    cache = memo.cache
    tails = memo.tails
    rests = memo.rests
    names = memo.names
    frames = memo.frames if memo.frames_on else None
    keep = memo.keep
    heads = memo.heads if memo.heads_on else None
    keep_head = memo.keep_head
    hits = misses = head_hits = head_misses = 0
    fkey = b""
    size = len(data) if stop is None else stop
    odd = 0
    zero = 0
    tail_misses = memo.tail_misses
    seen = memo.nodes
    frame_bytes = memo.frame_bytes  # kept here while the loop runs, then on the memo
    max_frames = memo.max_frames
    max_bytes = memo.max_bytes
    pg_names = memo.pg_names
    meta_nodes = 0
    try:
        while pos < size:
            frame = pos
            b = data[pos]
            if b < 0x80:
                pos += 1
                ln = b
            else:
                ln = 0
                shift = 0
                while True:
                    if pos >= size:
                        raise TraceFormatError(
                            f"{source}: truncated frame length at byte offset {frame}{note}"
                        )
                    if shift > 28:
                        raise TraceFormatError(
                            f"{source}: corrupt frame length at byte offset {frame}{note} "
                            "(varint too long)"
                        )
                    b = data[pos]
                    pos += 1
                    ln |= (b & 0x7F) << shift
                    shift += 7
                    if b < 0x80:
                        break
            end = pos + ln
            if end > size:
                raise TraceFormatError(
                    f"{source}: truncated frame at byte offset {frame}{note}: needs {ln} bytes, "
                    f"{size - pos} left"
                )
            if ln == 0:
                zero += 1
            if frames is not None:
                fkey = data[pos:end]
                hit = frames.get(fkey)
                if hit is not None:
                    n = new(Node)
                    (
                        n.id,
                        n.name,
                        n.type,
                        ctrl_t,
                        deps_t,
                        n.start_time_micros,
                        n.duration_micros,
                        n._inputs,
                        n._outputs,
                        attrs_b,
                        n._d,
                    ) = hit
                    n.raw_ctrl_deps = n.ctrl_deps = list(ctrl_t) if ctrl_t else []
                    n.data_deps = list(deps_t) if deps_t else []
                    n._attrs = [] if attrs_b is None else attrs_b
                    pos = end
                    append(n)
                    continue
                misses += 1
            h = None
            row = len(out)  # the frame's place in this call's frames (the key of ``heads``)
            if heads is not None and row < len(heads):
                # the fields before the attrs as at this place in an earlier file: the same bytes,
                # followed here by the attrs or the frame's end, decode the same way
                got = heads[row]
                for j, c in enumerate(got):
                    q = pos + c[1]
                    if q <= end and data.startswith(c[0], pos) and (q == end or data[q] == 0x52):
                        h = c
                        if j:
                            del got[j]
                            got.insert(0, c)
                        break
            try:
                if h is not None:
                    head_hits += 1
                    (_hb, hlen, nid, name, typ, ctrl_t, deps_t, st, dur, ins, outs) = h
                    ctrl = list(ctrl_t) if ctrl_t else []
                    deps = list(deps_t) if deps_t else []
                    pos += hlen
                else:
                    body = pos
                    nid = 0
                    name = ""
                    typ = 0
                    ctrl = []
                    deps = []
                    st = dur = 0
                    t = data[pos] if pos < end else 0
                    # Canonical order: each field at most once, ascending, attrs (10) last.
                    if t == 0x08:
                        b = data[pos + 1]
                        if b < 0x80:
                            nid = b
                            pos += 2
                        else:
                            b1 = data[pos + 2]
                            b2 = data[pos + 3]
                            if b1 >= 0x80 and 0 < b2 < 0x80:
                                nid = (b & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)
                                pos += 4
                            else:
                                nid, pos = _varint(data, pos + 1)
                                if data[pos - 1] == 0:
                                    raise _Fallback
                        if not nid:
                            raise _Fallback
                        t = data[pos] if pos < end else 0
                    if t == 0x12:
                        b = data[pos + 1]
                        if b < 0x80:
                            pos += 2
                            slen = b
                        else:
                            slen, pos = _varint(data, pos + 1)
                        stop = pos + slen
                        if stop > end or not slen:
                            raise _Fallback
                        key = data[pos:stop]
                        known = names.get(key)  # one str per distinct name (they repeat a lot)
                        if known is None:
                            known = key.decode("utf-8")
                            if len(names) < 1_000_000:
                                names[key] = known
                        name = known
                        pos = stop
                        t = data[pos] if pos < end else 0
                    if t == 0x18:
                        typ = data[pos + 1]
                        pos += 2
                        if not typ or typ >= 0x80:
                            raise _Fallback
                        t = data[pos] if pos < end else 0
                    if t == 0x22:
                        pos = _packed(data, pos + 1, end, ctrl)
                        t = data[pos] if pos < end else 0
                    if t == 0x2A:
                        plen, pos = _varint(data, pos + 1)
                        stop = pos + plen
                        if stop > end or not plen:
                            raise _Fallback
                        while pos < stop:  # varints unrolled up to 3 bytes (ids < 2^21)
                            b = data[pos]
                            if b < 0x80:
                                deps.append(b)
                                pos += 1
                                continue
                            b1 = data[pos + 1]
                            if b1 < 0x80:
                                if not b1:
                                    raise _Fallback
                                deps.append((b & 0x7F) | (b1 << 7))
                                pos += 2
                                continue
                            b2 = data[pos + 2]
                            if b2 < 0x80:
                                if not b2:
                                    raise _Fallback
                                deps.append((b & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14))
                                pos += 3
                                continue
                            v, pos = _varint(data, pos)
                            if not data[pos - 1] or v >= _U64:
                                raise _Fallback
                            deps.append(v)
                        if pos != stop:
                            raise _Fallback
                        t = data[pos] if pos < end else 0
                    if t == 0x30:
                        st, pos = _varint(data, pos + 1)
                        if not st or (data[pos - 1] == 0 and st > 0x7F):
                            raise _Fallback
                        t = data[pos] if pos < end else 0
                    if t == 0x38:
                        b = data[pos + 1]
                        if b < 0x80:
                            dur = b
                            pos += 2
                        else:
                            b1 = data[pos + 2]
                            if 0 < b1 < 0x80:
                                dur = (b & 0x7F) | (b1 << 7)
                                pos += 3
                            else:
                                dur, pos = _varint(data, pos + 1)
                                if data[pos - 1] == 0:
                                    raise _Fallback
                        if not dur:
                            raise _Fallback
                        t = data[pos] if pos < end else 0
                    ins = outs = None
                    if t == 0x42:
                        ins, pos = _check_io(data, pos + 1, end)
                        t = data[pos] if pos < end else 0
                    if t == 0x4A:
                        outs, pos = _check_io(data, pos + 1, end)
                        t = data[pos] if pos < end else 0
                    if pos > end:
                        raise _Fallback  # a field ran past the frame: let protobuf judge it
                    if pos < end and t != 0x52:
                        raise _Fallback  # unpacked deps, unknown or out-of-order fields
                    if nid >= _U64 or st >= _U64 or dur >= _U64:
                        raise _Fallback
                plain = True
                if pos < end:
                    key = data[pos:end]
                    tail = tails.get(key)
                    if tail is None:
                        derived, plain = _scan_attr_tail(data, pos, end, cache, rests)
                        tail = (derived, key)
                        tail_misses += 1
                        if type(derived[2]) is not list:  # every tuple a node gets is one
                            pg_names.add(derived[2])  # scanned here: its group noted once
                        if plain and tail_misses < 10_000 + 4 * (seen + len(out)) // 5:
                            # memoise while it pays: stop once most tails are unique
                            if len(tails) >= 100_000:
                                tails.clear()
                            tails[key] = tail
                    derived = tail[0]
                    attrs = tail[1]  # checked canonical bytes: Node.attrs decodes them when read
                else:
                    attrs = []
                    derived = _NO_DERIVED
                n = new(Node)
                n.id = nid
                n.name = name
                n.type = typ
                n.raw_ctrl_deps = n.ctrl_deps = ctrl
                n.data_deps = deps
                n.start_time_micros = st
                n.duration_micros = dur
                n._inputs = ins
                n._outputs = outs
                n._attrs = attrs
                n._d = derived
                if typ == _METADATA:
                    meta_nodes += 1
                if h is None and heads is not None:
                    head_misses += 1
                    keep_head(
                        row,
                        (
                            data[body:pos],
                            pos - body,
                            nid,
                            name,
                            typ,
                            tuple(ctrl),
                            tuple(deps),
                            st,
                            dur,
                            ins,
                            outs,
                        ),
                    )
                    heads = memo.heads  # keep_head may have started over
                if frames is not None and typ != _METADATA:  # (each counted as it is decoded)
                    fields = (
                        nid,
                        name,
                        typ,
                        tuple(ctrl) if h is None else ctrl_t,
                        tuple(deps) if h is None else deps_t,
                        st,
                        dur,
                        ins,
                        outs,
                        attrs if type(attrs) is bytes else None,
                        derived,
                    )
                    if len(frames) < max_frames and frame_bytes + ln <= max_bytes:
                        frames[fkey] = fields
                        frame_bytes += ln
                    else:  # full: ``keep`` starts over
                        memo.frame_bytes = frame_bytes
                        keep(fkey, fields)
                        frame_bytes = memo.frame_bytes
                pos = end
            except (_Fallback, IndexError, UnicodeDecodeError, DecodeError, struct.error):
                pos = end
                start = end - ln
                from genie.workload import et_schema  # protobuf: only where it reads

                m = et_schema.Node()
                try:
                    m.ParseFromString(data[start:end])
                except DecodeError as exc:
                    raise TraceFormatError(
                        f"{source}: corrupt Node frame at byte offset {frame}{note}: "
                        f"{exc or 'bad protobuf'}"
                    ) from None
                n = node_from_pb(m)
                from genie.workload.et_codec import encode_node

                if encode_node(n) != data[start:end]:
                    odd += 1
                if type(n._d[2]) is not list:
                    pg_names.add(n._d[2])
                if n.type == _METADATA:
                    meta_nodes += 1
            append(n)
    finally:
        memo.frame_bytes = frame_bytes
        memo.meta_nodes += meta_nodes
    if frames is not None:
        hits = len(out) - misses  # every frame gives one node
    memo.settle(hits, misses, len(out), tail_misses, head_hits, head_misses)
    return out, odd, zero
