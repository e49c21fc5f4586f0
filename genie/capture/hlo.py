"""A focused parser of XLA's HLO text (``compiled.as_text()``): computations, instructions,
shapes with dtypes, and the attributes capture needs (replica_groups in the explicit and iota
forms, source_target_pairs, contracting dims, called computations, trip counts).

Pure text processing: no jax import. Unknown attributes are kept as raw strings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

from genie.errors import TraceFormatError

#: Bytes per element of each HLO primitive type (sub-byte types rounded per tensor).
DTYPE_BITS = {
    "pred": 8,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "s16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "s32": 32,
    "u32": 32,
    "f32": 32,
    "s64": 64,
    "u64": 64,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "token": 0,
}


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (``dtype``, ``dims``) or a tuple of shapes (``dtype`` 'tuple')."""

    dtype: str
    dims: tuple[int, ...] = ()
    elements: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        """True for a tuple shape."""
        return self.dtype == "tuple"

    @property
    def num_elements(self) -> int:
        """Elements of an array shape (a tuple: the sum over its leaves)."""
        if self.is_tuple:
            return sum(e.num_elements for e in self.elements)
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole shape (a tuple: the sum over its leaves)."""
        if self.is_tuple:
            return sum(e.nbytes for e in self.elements)
        bits = DTYPE_BITS.get(self.dtype)
        if bits is None:
            if self.dtype.startswith("f8") or self.dtype.startswith("f4"):
                bits = 8 if self.dtype.startswith("f8") else 4
            else:
                raise TraceFormatError(f"HLO: unknown element type {self.dtype!r}")
        return (math.prod(self.dims) * bits + 7) // 8

    def leaves(self) -> list[Shape]:
        """The array shapes of this shape, in order."""
        if not self.is_tuple:
            return [self]
        return [leaf for e in self.elements for leaf in e.leaves()]

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(e) for e in self.elements) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass
class Instruction:
    """One HLO instruction: result ``shape``, ``opcode``, operand names and raw attributes."""

    name: str
    shape: Shape
    opcode: str
    operands: list[str]
    attrs: dict[str, str] = field(default_factory=dict)
    is_root: bool = False
    operand_text: str = ""

    def called(self) -> list[str]:
        """Names of the computations this instruction calls (fusion, call, while, ...)."""
        out = []
        for key in ("calls", "to_apply", "body", "condition"):
            if key in self.attrs:
                out += [c.strip().lstrip("%") for c in self.attrs[key].strip("{}").split(",")]
        if "branch_computations" in self.attrs:
            out += [
                c.strip().lstrip("%")
                for c in self.attrs["branch_computations"].strip("{}").split(",")
            ]
        return [c for c in out if c]


@dataclass
class Computation:
    """A named HLO computation: its instructions in (scheduled) order."""

    name: str
    instructions: list[Instruction]
    is_entry: bool = False

    def __post_init__(self) -> None:
        self.by_name = {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction:
        """The ROOT instruction (the last one when none is marked)."""
        for i in self.instructions:
            if i.is_root:
                return i
        return self.instructions[-1]


@dataclass
class HloModule:
    """A parsed HLO module: computations by name, the entry's name, and header fields."""

    name: str
    computations: dict[str, Computation]
    entry: str
    num_partitions: int = 1
    num_replicas: int = 1

    @property
    def entry_computation(self) -> Computation:
        """The ENTRY computation."""
        return self.computations[self.entry]


# ------------------------------------------------------------------ low-level scanning


def _match_close(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]`` (quotes respected)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[start]]]
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    raise TraceFormatError(f"HLO: unbalanced brackets in {text[start : start + 80]!r}")


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and quotes; items stripped, empties dropped."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur).strip())
    return [x for x in out if x]


_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([0-9,\s]*)\]")


def parse_shape(text: str) -> tuple[Shape, int]:
    """Parse the shape at the start of ``text``; returns it and the index just past it."""
    i = 0
    while i < len(text) and text[i] == " ":
        i += 1
    if text.startswith("(", i):
        end = _match_close(text, i)
        inner = text[i + 1 : end - 1]
        elements = tuple(parse_shape(part)[0] for part in split_top(inner))
        return Shape("tuple", (), elements), end
    m = _ARRAY_RE.match(text, i)
    if not m:
        raise TraceFormatError(f"HLO: expected a shape at {text[i : i + 60]!r}")
    dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    j = m.end()
    if text.startswith("{", j):  # layout, e.g. {1,0} or {1,0:T(8,128)}
        j = _match_close(text, j)
    return Shape(m.group(1), dims), j


_INSTR_RE = re.compile(r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_COMP_RE = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->.*\{\s*$")
_COMMENT_RE = re.compile(r"/\*.*?\*/")
_OPERAND_NAME_RE = re.compile(r"%?([\w.\-]+)\s*$")


def parse_instruction(line: str) -> Instruction:
    """Parse one instruction line ``[ROOT] %name = SHAPE opcode(operands), attr=value, ...``."""
    m = _INSTR_RE.match(line)
    if not m:
        raise TraceFormatError(f"HLO: not an instruction: {line.strip()[:100]!r}")
    shape, j = parse_shape(line[m.end() :])
    rest = line[m.end() + j :].lstrip()
    om = re.match(r"([a-z][\w\-]*)\(", rest)
    if not om:
        raise TraceFormatError(f"HLO: no opcode in {line.strip()[:100]!r}")
    opcode = om.group(1)
    close = _match_close(rest, om.end() - 1)
    operand_text = rest[om.end() : close - 1]
    operands = []
    if opcode != "constant":
        for op in split_top(operand_text):
            nm = _OPERAND_NAME_RE.search(op)
            if nm:
                operands.append(nm.group(1))
    attrs: dict[str, str] = {}
    for item in split_top(rest[close:].lstrip(", ")):
        key, eq, value = item.partition("=")
        attrs[key.strip()] = value.strip() if eq else ""
    return Instruction(m.group(2), shape, opcode, operands, attrs, bool(m.group(1)), operand_text)


def parse_hlo(text: str) -> HloModule:
    """Parse a whole HLO module text (as printed by ``compiled.as_text()``)."""
    header = re.search(r"^HloModule\s+([\w.\-]+)(.*)$", text, re.M)
    if not header:
        raise TraceFormatError("HLO: no 'HloModule' header line")
    fields = header.group(2)
    parts = re.search(r"num_partitions=(\d+)", fields)
    reps = re.search(r"replica_count=(\d+)", fields)
    computations: dict[str, Computation] = {}
    entry = None
    current: list[Instruction] | None = None
    cname, is_entry = "", False
    for line in text.splitlines():
        if current is None:
            m = _COMP_RE.match(line)
            if m:
                cname, is_entry, current = m.group(2), bool(m.group(1)), []
            continue
        if line.strip() == "}":
            computations[cname] = Computation(cname, current, is_entry)
            if is_entry:
                entry = cname
            current = None
            continue
        if line.strip():
            current.append(parse_instruction(_COMMENT_RE.sub("", line)))
    if current is not None:
        raise TraceFormatError(f"HLO: computation {cname!r} is not closed")
    if entry is None:
        raise TraceFormatError("HLO: no ENTRY computation")
    return HloModule(
        header.group(1),
        computations,
        entry,
        int(parts.group(1)) if parts else 1,
        int(reps.group(1)) if reps else 1,
    )


# ------------------------------------------------------------------ attribute values


def int_list(text: str) -> list[int]:
    """``{1,2}`` or ``1,2`` -> [1, 2]."""
    return [int(x) for x in text.strip().strip("{}").replace(" ", "").split(",") if x]


def _balanced(t: str) -> bool:
    try:
        return _match_close(t, 0) == len(t)
    except TraceFormatError:
        return False


_IOTA_RE = re.compile(r"^\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?$")


def parse_replica_groups(text: str | None, n_devices: int) -> list[tuple[int, ...]]:
    """Replica groups in the explicit ``{{0,1},{2,3}}`` or iota ``[2,2]<=[2,2]T(1,0)`` form.

    An absent or empty ``{}`` value means one group of all ``n_devices``.
    """
    if text is None:
        return [tuple(range(n_devices))]
    t = text.replace(" ", "")
    if t.startswith("mesh["):
        return _mesh_groups(t)
    m = _IOTA_RE.match(t)
    if m:
        shape = int_list(m.group(1))
        dims = int_list(m.group(2))
        ids = np.arange(math.prod(dims)).reshape(dims)
        if m.group(3):
            ids = ids.transpose(int_list(m.group(3)))
        ids = ids.reshape(shape[0], -1) if len(shape) >= 1 else ids.reshape(1, -1)
        return [tuple(int(x) for x in row) for row in ids]
    if not (t.startswith("{") and _balanced(t)):
        raise TraceFormatError(f"HLO: cannot read replica_groups={text!r}")
    inner = t[1:-1]
    if not inner:
        return [tuple(range(n_devices))]
    groups = [tuple(int_list(g)) for g in split_top(inner)]
    return [g for g in groups if g] or [tuple(range(n_devices))]


_MESH_RE = re.compile(r"^mesh\[([^\]]*)\]\{([^}]*)\}$")
_MESH_AXIS_RE = re.compile(r"^'([^']+)'=(\d+)$")


def _mesh_groups(t: str) -> list[tuple[int, ...]]:
    """Shardy's ``mesh['a'=2,'b'=4] {'b'}``: devices 0..n-1 row-major over the mesh, one group
    per coordinate of the axes not listed, members varying over the listed axes in order."""
    m = _MESH_RE.match(t)
    if not m:
        raise TraceFormatError(f"HLO: cannot read replica_groups={t!r} (mesh form)")
    names, sizes = [], []
    for part in split_top(m.group(1)):
        am = _MESH_AXIS_RE.match(part)
        if not am:
            raise TraceFormatError(f"HLO: cannot read mesh axis {part!r} in replica_groups={t!r}")
        names.append(am.group(1))
        sizes.append(int(am.group(2)))
    listed = [x.strip("'") for x in split_top(m.group(2))]
    if any(x not in names for x in listed):
        raise TraceFormatError(f"HLO: replica_groups={t!r} names an axis not in its mesh")
    varying = [names.index(x) for x in listed]
    fixed = [i for i in range(len(names)) if i not in varying]
    ids = np.arange(math.prod(sizes)).reshape(sizes).transpose(fixed + varying)
    ids = ids.reshape(-1, math.prod(sizes[i] for i in varying))
    return [tuple(int(x) for x in row) for row in ids]


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """``source_target_pairs={{0,1},{1,2}}`` -> [(0, 1), (1, 2)]."""
    t = text.replace(" ", "")
    if not (t.startswith("{") and _balanced(t)):
        raise TraceFormatError(f"HLO: cannot read source_target_pairs={text!r}")
    out = []
    for p in split_top(t[1:-1]):
        v = int_list(p)
        if len(v) != 2:
            raise TraceFormatError(f"HLO: a source_target pair must have 2 ranks: {p!r}")
        out.append((v[0], v[1]))
    return out


def known_trip_count(inst: Instruction) -> int | None:
    """The ``known_trip_count`` XLA records in a while loop's backend_config, if any."""
    cfg = inst.attrs.get("backend_config")
    if not cfg:
        return None
    try:
        n = json.loads(cfg).get("known_trip_count", {}).get("n")
    except (ValueError, AttributeError):
        m = re.search(r'known_trip_count"?\s*:\s*\{\s*"?n"?\s*:\s*"?(\d+)', cfg)
        n = m.group(1) if m else None
    return int(n) if n is not None else None
