"""The decoder of Chakra's JSON traces (``chakra_jsonizer``'s form): ``genie.workload.chakra_json``
describes the format and loads this module on the first JSON trace, so that reading ``.et``
files imports neither it nor the feeder form's reader (start-up, issue 33).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

import msgspec

from genie.errors import TraceFormatError
from genie.workload.et_schema import NODE_TYPES, SCALAR_KINDS
from genie.workload.feeder_json import decode_feeder, is_feeder_json
from genie.workload.model import Attr, IOInfo, Metadata, Node

_NODE_TYPE = {name: i for i, name in enumerate(NODE_TYPES)}
_INT_KINDS = {k for k, _n, _l, _t in SCALAR_KINDS} - {"double", "float", "bool", "string", "bytes"}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.title() for w in rest)


#: JSON key of an attr value (both spellings) -> (our kind name, scalar base kind)
_VALUE_KEYS: dict[str, tuple[str, str]] = {}
for _k, _n, _l, _t in SCALAR_KINDS:
    for _form in ("val", "list"):
        _VALUE_KEYS[f"{_k}_{_form}"] = (f"{_k}_{_form}", _k)
        _VALUE_KEYS[_camel(f"{_k}_{_form}")] = (f"{_k}_{_form}", _k)
_NODE_KEYS = {
    "id",
    "name",
    "type",
    "ctrlDeps",
    "ctrl_deps",
    "dataDeps",
    "data_deps",
    "startTimeMicros",
    "start_time_micros",
    "durationMicros",
    "duration_micros",
    "inputs",
    "outputs",
    "attr",
}
_U64 = 1 << 64


class _Bad(Exception):
    """A value that protobuf's JSON mapping does not allow here (message says why)."""


def _int(v: Any, what: str, lo: int = 0, hi: int = _U64 - 1) -> int:
    if type(v) is str:
        try:
            v = int(v)
        except ValueError:
            raise _Bad(f"{what} {v!r} is not an integer") from None
    elif type(v) is float and v.is_integer():
        v = int(v)
    elif type(v) is not int:
        raise _Bad(f"{what} {v!r} is not an integer")
    if not lo <= v <= hi:
        raise _Bad(f"{what} {v} is out of range")
    return v


_RANGE = {
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint32": (0, (1 << 32) - 1),
    "uint64": (0, _U64 - 1),
    "sint32": (-(1 << 31), (1 << 31) - 1),
    "sint64": (-(1 << 63), (1 << 63) - 1),
    "fixed32": (0, (1 << 32) - 1),
    "fixed64": (0, _U64 - 1),
    "sfixed32": (-(1 << 31), (1 << 31) - 1),
    "sfixed64": (-(1 << 63), (1 << 63) - 1),
}
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _scalar(base: str, v: Any) -> Any:
    """One attr value of kind ``base`` from its JSON form."""
    if base in _INT_KINDS:
        lo, hi = _RANGE[base]
        return _int(v, f"{base} value", lo, hi)
    if base == "bool":
        if type(v) is not bool:
            raise _Bad(f"bool value {v!r} is not true/false")
        return v
    if base == "string":
        if type(v) is not str:
            raise _Bad(f"string value {v!r} is not a string")
        return v
    if base == "bytes":
        if type(v) is not str:
            raise _Bad(f"bytes value {v!r} is not base64 text")
        try:
            return base64.b64decode(v + "=" * (-len(v) % 4), altchars=b"-_" if "-" in v else None)
        except (binascii.Error, ValueError):
            raise _Bad(f"bytes value {v[:20]!r} is not base64") from None
    # double, float
    if type(v) is str:
        if v in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[v]
        try:
            return float(v)
        except ValueError:
            raise _Bad(f"{base} value {v!r} is not a number") from None
    if type(v) in (int, float):
        return float(v)
    raise _Bad(f"{base} value {v!r} is not a number")


_ATTR_MEMO: dict[tuple, Attr] = {}


def _attr_memo(a: Any) -> Attr:
    """``_attr`` for the common ``{"name": ..., "<kind>": scalar}`` object, memoised."""
    if type(a) is dict and len(a) == 2:
        (k1, name), (k2, v) = a.items()
        tv = type(v)
        if k1 == "name" and type(name) is str and tv in _SCALAR_TYPES:
            # -0.0 == 0.0 and hashes alike: a float's sign is part of its key
            key = (name, k2, v, tv) if tv is not float else (name, k2, v, tv, math.copysign(1.0, v))
            hit = _ATTR_MEMO.get(key)
            if hit is not None:
                return hit
            digits = v[1:] if tv is str and v[:1] == "-" else v
            if k2 == "int64Val" and tv is str and digits.isascii() and digits.isdigit():
                iv = int(v)  # mostly unique values (ids, sizes): not memoised
                if -(1 << 63) <= iv < 1 << 63:
                    return Attr(name, "int64_val", iv, "")
            hit = _attr(a)
            if len(_ATTR_MEMO) > 100_000:
                _ATTR_MEMO.clear()
            _ATTR_MEMO[key] = hit
            return hit
    return _attr(a)


_SCALAR_TYPES = (str, bool, int, float)


def _attr(d: Any) -> Attr:
    if type(d) is not dict:
        raise _Bad(f"attr {d!r} is not an object")
    name = d.get("name", "")
    doc = d.get("docString", d.get("doc_string", ""))
    if type(name) is not str or type(doc) is not str:
        raise _Bad(f"attr {d!r}: name and docString must be strings")
    kind = base = None
    value: Any = None
    for key, raw in d.items():
        if key in ("name", "docString", "doc_string"):
            continue
        spec = _VALUE_KEYS.get(key)
        if spec is None:
            raise _Bad(f"attr {name!r}: unknown field {key!r}")
        if kind is not None:
            raise _Bad(f"attr {name!r}: two values ({kind} and {spec[0]})")
        kind, base = spec
        if kind.endswith("_list"):
            if raw is None or raw == {}:
                value = []
            elif type(raw) is not dict or type(raw.get("values", [])) is not list or len(raw) > 1:
                raise _Bad(f'attr {name!r}: {key} must be {{"values": [...]}}')
            else:
                value = [_scalar(base, x) for x in raw.get("values", [])]
        else:
            value = _scalar(base, raw)
    return Attr(name, kind, value, doc)


def _io(d: Any, what: str) -> IOInfo:
    if type(d) is not dict or not set(d) <= {"values", "shapes", "types"}:
        raise _Bad(f"{what} {str(d)[:60]!r} is not an IOInfo object")
    vals = (d.get("values", ""), d.get("shapes", ""), d.get("types", ""))
    if not all(type(x) is str for x in vals):
        raise _Bad(f"{what}: values, shapes and types must be strings")
    return IOInfo(*vals)


def _deps(v: Any, what: str) -> list[int]:
    if type(v) is not list:
        raise _Bad(f"{what} must be a list")
    return [_int(x, what) for x in v]


def _node(d: dict) -> Node:
    extra = set(d) - _NODE_KEYS
    if extra:
        raise _Bad(f"unknown node field(s) {sorted(extra)}")
    t = d.get("type", 0)
    if type(t) is str:
        if t not in _NODE_TYPE:
            raise _Bad(f"unknown node type {t!r}")
        t = _NODE_TYPE[t]
    else:
        t = _int(t, "type", -(1 << 31), (1 << 31) - 1)
    name = d.get("name", "")
    if type(name) is not str:
        raise _Bad(f"name {name!r} is not a string")
    attrs = _attr_list(d)
    ins, outs = d.get("inputs"), d.get("outputs")
    return Node(
        _int(d.get("id", 0), "id"),
        name,
        t,
        data_deps=_deps(d.get("dataDeps", d.get("data_deps", [])), "dataDeps"),
        ctrl_deps=_deps(d.get("ctrlDeps", d.get("ctrl_deps", [])), "ctrlDeps"),
        start_time_micros=_int(d.get("startTimeMicros", d.get("start_time_micros", 0)), "start"),
        duration_micros=_int(d.get("durationMicros", d.get("duration_micros", 0)), "duration"),
        inputs=_io(ins, "inputs") if ins is not None else None,
        outputs=_io(outs, "outputs") if outs is not None else None,
        attrs=[_attr_memo(a) for a in attrs],
    )


def _metadata(d: dict) -> Metadata:
    if not set(d) <= {"version", "attr"}:
        raise _Bad(f"GlobalMetadata has unknown field(s) {sorted(set(d) - {'version', 'attr'})}")
    version = d.get("version", "")
    if type(version) is not str:
        raise _Bad(f"version {version!r} is not a string")
    return Metadata(version, [_attr(a) for a in _attr_list(d)])


def _attr_list(d: dict) -> list:
    """The ``attr`` list of a Node or GlobalMetadata object (empty when left out)."""
    attrs = d.get("attr", [])
    if type(attrs) is not list:
        raise _Bad("attr must be a list")
    return attrs


def split_objects(text: str, source: str) -> list[Any]:
    """The top-level JSON values of a file of values written one after another."""
    # Fast path: protobuf's pretty printer closes a top-level object with "}" at the start of
    # a line, and a raw newline cannot occur inside a JSON string, so "\n}{" is exactly a
    # boundary between two objects: turn the file into one JSON array and parse it in C.
    try:
        return msgspec.json.decode("[" + text.replace("\n}{", "\n},{") + "]")
    except msgspec.DecodeError:
        pass
    dec = json.JSONDecoder()
    out: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            return out
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(
                f"{source}: not Chakra JSON: object #{len(out)}: {exc.msg} at character {exc.pos}"
            ) from None
        out.append(obj)


def decode_chakra_json(
    data: bytes, source: str = "<json>"
) -> tuple[Metadata, list[Node], list[str]]:
    """Decode a jsonizer file: metadata, nodes, and problems noticed."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{source}: not UTF-8 text at byte {exc.start}") from None
    objs = split_objects(text, source)
    if not objs:
        raise TraceFormatError(f"{source}: empty JSON trace (no GlobalMetadata object)")
    if not all(type(o) is dict for o in objs):
        k = next(i for i, o in enumerate(objs) if type(o) is not dict)
        raise TraceFormatError(f"{source}: JSON value #{k} is not an object")
    head = objs[0]
    if len(objs) == 1 and is_feeder_json(head):
        return decode_feeder(head, source)
    if head.get("format") == "genie-chakra-json":
        raise TraceFormatError(
            f"{source}: this is genie's own JSON form (genie workload convert), not Chakra's "
            "jsonizer output; convert it back to .et with `genie workload convert`"
        )
    problems = []
    if set(head) <= {"version", "attr"}:
        start = 1
        try:
            meta = _metadata(head)
        except _Bad as exc:
            raise TraceFormatError(f"{source}: GlobalMetadata object: {exc}") from None
    elif not set(head) & _NODE_KEYS:
        raise TraceFormatError(
            f"{source}: not a JSON form genie reads (top-level keys {sorted(head)[:8]}); it "
            "reads Chakra's jsonizer form (a GlobalMetadata object, then one object per node), "
            "Chakra's feeder form (an object with a workload_graph list) and genie's own "
            "(genie workload convert)"
        )
    else:
        start = 0
        meta = Metadata()
        problems.append(f"{source}: no GlobalMetadata object first; version {meta.version} assumed")
    nodes: list[Node] = []
    append = nodes.append
    for k in range(start, len(objs)):
        try:
            append(_node(objs[k]))
        except _Bad as exc:
            raise TraceFormatError(f"{source}: node object #{k - start}: {exc}") from None
    return meta, nodes, problems
