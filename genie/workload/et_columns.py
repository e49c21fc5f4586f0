"""Columnar decoding of Chakra ET node frames: every field of every frame in numpy passes.

``decode_columns`` splits the node frames, then walks the canonical field order (id, name,
type, ctrl_deps, data_deps, start, duration, inputs, outputs, attrs) once per field over all
frames at once, and keeps the result as columns (``NodeColumns``): ids, types, times, both
dependency lists in CSR form, spans of the IOInfo bodies and attr fields in the file's bytes,
node names interned once, and each node's derived fields (``genie.workload.model``) as an index
into a table of distinct derived tuples. Attr fields are decoded once per distinct byte string:
the fields after a node's first attr (real traces put a per-node id such as ``rf_id`` first and
repeat the rest), with a first attr of the form ``name + plain int64`` read in numpy.

What this decoder accepts is a subset of what ``et_fast.decode_nodes`` accepts on its fast path
(canonical bytes, shortest varints); any other frame is handed, alone, to ``et_fast`` (and from
there to protobuf), so ``NodeColumns.to_nodes`` gives the very nodes ``et_fast`` gives, with
attrs and IOInfo kept as their checked bytes (a re-write copies them). Tests compare the two
node for node.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from genie.errors import WorkloadError
from genie.workload import et_fast
from genie.workload.model import NO_DERIVED, Derived, Node

log = logging.getLogger(__name__)

_U64 = np.uint64
_PAD = 16  # zero bytes after the data: a read past the end sees a varint terminator
_MAX_LEN = 1 << 31  # longer length fields go to the per-frame decoder
_BLOCK_FRAMES = 1 << 16  # frames decoded together (in-cache passes, a bounded copy)
_SECTIONS_KEPT = 1 << 16  # distinct runs of attr fields an Interner keeps between blocks


@dataclass
class NodeColumns:
    """One rank's node frames as columns; row ``i`` is the ``i``-th node frame of ``data``.

    Spans are offsets into ``data``; an absent IOInfo has span ``(-1, -1)``, absent attrs an
    empty span. ``fallback`` holds the rows decoded frame by frame (by ``et_fast``): their
    columns are not filled, ``to_nodes`` takes the node from there.
    """

    data: bytes
    frame: np.ndarray  # int64: offset of each frame's length prefix
    id: np.ndarray  # uint64
    type: np.ndarray  # uint8
    name: np.ndarray  # int32 index into names (0: no name)
    names: list[str]
    start_micros: np.ndarray  # uint64
    duration_micros: np.ndarray  # uint64
    ctrl_offsets: np.ndarray  # int64, rows + 1
    ctrl_deps: np.ndarray  # uint64
    data_offsets: np.ndarray  # int64, rows + 1
    data_deps: np.ndarray  # uint64
    inputs: np.ndarray  # int64 (rows, 2): IOInfo body span or -1
    outputs: np.ndarray  # int64 (rows, 2)
    attrs: np.ndarray  # int64 (rows, 2): the attr fields' span
    derived: np.ndarray  # int32 index into derived_table
    derived_table: list[Derived]
    fallback: dict[int, Node] = field(default_factory=dict)
    odd: int = 0  # fallback frames whose re-encoding differs (non-canonical or unknown fields)
    zero: int = 0  # zero-length frames
    #: the file ``data`` came from (``release`` may drop ``data``; it is read again when needed)
    path: Path | None = None
    _size: int = field(default=0, repr=False)  # len(data) before release
    _stamp: tuple[int, int] | None = field(default=None, repr=False)  # the file's size, mtime

    def unchanged(self, st: os.stat_result) -> None:
        """Refuse (one line) a file whose size or modification time is not what was read."""
        if self._stamp is not None and (st.st_size, st.st_mtime_ns) != self._stamp:
            raise WorkloadError(f"{self.path}: changed since it was read")

    def __len__(self) -> int:
        return len(self.frame)

    def release(self) -> None:
        """Drop the file's bytes (the columns stay); names, attrs and IOInfo read the file again
        when a node is made. Only for columns read from a file (``path`` set)."""
        if self.path is not None and self.data:
            self._size = len(self.data)
            try:
                st = os.stat(self.path)
                self._stamp = (st.st_size, st.st_mtime_ns)
            except OSError:
                self._stamp = None  # read again, it is compared by length
            self.data = b""

    def _bytes(self) -> bytes:
        """``data``, read again from ``path`` after ``release``."""
        if self.data or self.path is None or not self._size:
            return self.data
        from genie.workload.et_codec import open_bytes

        try:
            self.unchanged(os.stat(self.path))
        except OSError as exc:
            raise WorkloadError(f"{self.path}: cannot read it again ({exc.strerror})") from None
        data, _note = open_bytes(self.path)
        if len(data) != self._size:
            raise WorkloadError(f"{self.path}: changed since it was read ({len(data)} bytes now)")
        return data

    def nbytes(self) -> int:
        """Bytes held by the columns (not ``data``, not the interned strings and tuples)."""
        return sum(
            a.nbytes
            for a in (
                self.frame,
                self.id,
                self.type,
                self.name,
                self.start_micros,
                self.duration_micros,
                self.ctrl_offsets,
                self.ctrl_deps,
                self.data_offsets,
                self.data_deps,
                self.inputs,
                self.outputs,
                self.attrs,
                self.derived,
            )
        )

    def derived_column(self, slot: int) -> np.ndarray:
        """One derived field (a ``model.DERIVED_INDEX`` slot) per row, as an object array."""
        col = np.empty(len(self.derived_table), dtype=object)
        col[:] = [d[slot] for d in self.derived_table]
        out = col[self.derived]
        for r, n in self.fallback.items():
            out[r] = n._d[slot]
        return out

    def nodes(self, rows: list[int]) -> list[Node]:
        """Rows ``rows`` as model Nodes (the file read at most once)."""
        if not rows:
            return []
        data = self._bytes()
        return [self.node(r, data) for r in rows]

    def node(self, r: int, data: bytes | None = None) -> Node:
        """Row ``r`` as a model Node (what ``to_nodes()[r]`` would be)."""
        got = self.fallback.get(r)
        if got is not None:
            return got
        if data is None:
            data = self._bytes()
        nd = Node.__new__(Node)
        nd.id = int(self.id[r])
        nd.name = self.names[self.name[r]]
        nd.type = int(self.type[r])
        c0, c1 = self.ctrl_offsets[r : r + 2].tolist()
        nd.raw_ctrl_deps = nd.ctrl_deps = self.ctrl_deps[c0:c1].tolist()
        d0, d1 = self.data_offsets[r : r + 2].tolist()
        nd.data_deps = self.data_deps[d0:d1].tolist()
        nd.start_time_micros = int(self.start_micros[r])
        nd.duration_micros = int(self.duration_micros[r])
        i0, i1 = self.inputs[r].tolist()
        nd._inputs = data[i0:i1] if i0 >= 0 else None
        o0, o1 = self.outputs[r].tolist()
        nd._outputs = data[o0:o1] if o0 >= 0 else None
        a0, a1 = self.attrs[r].tolist()
        nd._attrs = data[a0:a1] if a0 < a1 else []
        nd._d = self.derived_table[self.derived[r]]
        return nd

    def rows_of_type(self, *types: int) -> np.ndarray:
        """Rows whose node type is one of ``types`` (fallback rows included), ascending."""
        mask = np.isin(self.type, types)
        for r, nd in self.fallback.items():
            mask[r] = nd.type in types
        return np.flatnonzero(mask)

    def to_nodes(self) -> list[Node]:
        """The rows as model Nodes (what ``et_fast.decode_nodes`` gives for the same bytes)."""
        data = self._bytes()
        n = len(self)
        ins = _span_bytes(data, self.inputs, n)
        outs = _span_bytes(data, self.outputs, n)
        a0 = self.attrs[:, 0].tolist()
        a1 = self.attrs[:, 1].tolist()
        attrs: list[Any] = [data[s:e] if s < e else [] for s, e in zip(a0, a1, strict=True)]
        ctrl = _row_lists(self.ctrl_deps, self.ctrl_offsets)
        deps = _row_lists(self.data_deps, self.data_offsets)
        names = self.names
        table = self.derived_table
        out: list[Node] = []
        append = out.append
        new = Node.__new__
        for nid, nm, ty, cl, dl, st, du, i_, o_, at, dk in zip(
            self.id.tolist(),
            self.name.tolist(),
            self.type.tolist(),
            ctrl,
            deps,
            self.start_micros.tolist(),
            self.duration_micros.tolist(),
            ins,
            outs,
            attrs,
            self.derived.tolist(),
            strict=True,
        ):
            nd = new(Node)
            nd.id = nid
            nd.name = names[nm]
            nd.type = ty
            nd.raw_ctrl_deps = nd.ctrl_deps = cl
            nd.data_deps = dl
            nd.start_time_micros = st
            nd.duration_micros = du
            nd._inputs = i_
            nd._outputs = o_
            nd._attrs = at
            nd._d = table[dk]
            append(nd)
        for r, nd in self.fallback.items():
            out[r] = nd
        return out


def _row_lists(vals: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    """Each row's values of a CSR list column (``offsets``, ``vals``) as a fresh list; where
    most rows hold one value (a converter's one ctrl dep, a chain's one data dep) those are
    made from the values directly, not by slicing, and the other rows patched in."""
    counts = np.diff(offsets)
    one = counts == 1
    singles = int(np.count_nonzero(one))
    v = vals.tolist()
    if singles * 2 <= len(counts):
        return [v[a:b] for a, b in itertools.pairwise(offsets.tolist())]
    if singles == len(counts):
        return [[x] for x in v]
    first = vals[np.minimum(offsets[:-1], len(vals) - 1)]
    out = [[x] for x in first.tolist()]
    o = offsets.tolist()
    for r in np.flatnonzero(~one).tolist():
        out[r] = v[o[r] : o[r + 1]]
    return out


def _span_bytes(data: bytes, spans: np.ndarray, n: int) -> list[bytes | None]:
    """The bytes of each row's span, None where there is none (start -1)."""
    s, e = spans.T.tolist()
    return [data[a:b] if a >= 0 else None for a, b in zip(s, e, strict=True)]


class _Unsplittable(Exception):
    """The frames cannot be split (truncated or corrupt length): the per-frame decoder reports."""


def _split(data: bytes, pos: int) -> tuple[list[int], list[int]]:
    """Frame offsets and body ends from ``pos`` to the end of ``data``."""
    frames: list[int] = []
    append = frames.append
    size = len(data)
    while pos < size:
        try:  # length prefixes of one or two bytes (frames under 16 KiB) until one is longer
            while True:
                b = data[pos]
                if b < 0x80:
                    append(pos)
                    pos += b + 1
                    continue
                b1 = data[pos + 1]
                if b1 >= 0x80:
                    break
                append(pos)
                pos += 2 + ((b & 0x7F) | (b1 << 7))
        except IndexError:  # at or past the end, or a prefix cut by it
            if pos < size:
                raise _Unsplittable from None
            break
        append(pos)
        ln = b & 0x7F
        shift = 7
        pos += 1
        while True:
            if pos >= size or shift > 28:
                raise _Unsplittable
            b = data[pos]
            pos += 1
            ln |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        pos += ln
    if pos > size:
        raise _Unsplittable
    ends = frames[1:]
    if frames:
        ends.append(size)
    return frames, ends


def _varints(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Varints at offsets ``p``: values (uint64), offsets after them, and whether each is in
    shortest form and fits 64 bits."""
    b = buf[p]
    v = b.astype(_U64)
    q = p + 1
    ok = np.ones(len(p), dtype=bool)
    sel = np.flatnonzero(b >= 0x80)
    if sel.size:
        v[sel] &= _U64(0x7F)
        shift = 7
        while sel.size:
            if shift > 63:
                ok[sel] = False
                break
            bb = buf[q[sel]]
            v[sel] |= (bb & 0x7F).astype(_U64) << _U64(shift)
            q[sel] += 1
            more = bb >= 0x80
            done = ~more
            last = bb[done]
            # shortest form: a multi-byte varint does not end in a zero byte; 64 bits at most
            ok[sel[done]] = (last != 0) & ((shift < 63) | (last <= 1))
            sel = sel[more]
            shift += 7
    return v, q, ok


def _lengths(
    buf: np.ndarray, p: np.ndarray, bad: np.ndarray, rows: np.ndarray, empty: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """A length field at ``p`` (rows ``rows``), non-empty unless ``empty``: (body start, body
    end); marks ``bad``."""
    ln, q, ok = _varints(buf, p)
    ok &= ((ln > 0) | empty) & (ln < _MAX_LEN)
    bad[rows[~ok]] = True
    ln[~ok] = 0
    return q, q + ln.astype(np.int64)


def _packed(
    buf: np.ndarray, spans: np.ndarray, rows: np.ndarray, n: int, bad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decode packed uint64 lists (body spans of ``rows``) into CSR: offsets (n + 1), values."""
    keep = ~bad[rows]
    rows, spans = rows[keep], spans[keep]
    lens = spans[:, 1] - spans[:, 0]
    total = int(lens.sum())
    if not total:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=_U64)
    first = np.cumsum(lens) - lens  # where each span starts in the gathered bytes
    at = np.repeat(spans[:, 0] - first, lens) + np.arange(total, dtype=np.int64)
    b = buf[at]
    term = b < 0x80
    ends_ok = term[first + lens - 1]
    if not ends_ok.all():  # a varint runs past its span: those frames go frame by frame
        bad[rows[~ends_ok]] = True
        return _packed(buf, spans, rows, n, bad)
    stops = np.flatnonzero(term)  # the last byte of each varint
    vstart = np.empty(len(stops), dtype=np.int64)
    vstart[0] = 0
    vstart[1:] = stops[:-1] + 1
    vlen = stops - vstart + 1
    k = np.arange(total, dtype=np.int64) - np.repeat(vstart, vlen)
    shifted = (b & 0x7F).astype(_U64) << (7 * np.minimum(k, 9)).astype(_U64)
    vals = np.add.reduceat(shifted, vstart)
    last = b[stops]
    vok = (vlen == 1) | ((last != 0) & ((vlen < 10) | ((vlen == 10) & (last <= 1))))
    counts = np.add.reduceat(term.astype(np.int64), first)
    if not vok.all():
        row_of = np.repeat(rows, counts)
        bad[row_of[~vok]] = True
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[rows + 1] = counts
    np.cumsum(offsets, out=offsets)
    return offsets, vals


def _check_io(buf: np.ndarray, span: np.ndarray, rows: np.ndarray, bad: np.ndarray) -> None:
    """Mark ``bad`` the IOInfo bodies that are not canonical (string fields 1..3, ascending,
    once each, non-empty, shortest lengths, ending at the body's end). UTF-8 is checked later."""
    r = span[:, 0].copy()
    end = span[:, 1]
    last = np.zeros(len(r), dtype=np.int64)
    ok = np.ones(len(r), dtype=bool)
    for _ in range(3):
        act = r < end
        if not act.any():
            break
        key = buf[r].astype(np.int64)
        k = (key >> 3) - 1
        good = ((key & 7) == 2) & (k >= last) & (k < 3)
        ln, q, vok = _varints(buf, r + 1)
        good &= vok & (ln > 0) & (ln < _MAX_LEN)
        nr = q + np.where(good, ln, 0).astype(np.int64)
        good &= nr <= end
        ok &= ~act | good
        r = np.where(act & good, nr, r)
        last = np.where(act, k + 1, last)
    ok &= r == end
    bad[rows[~ok]] = True


def _slices(data: bytes, s: np.ndarray, e: np.ndarray) -> list[bytes]:
    """``data[s[i]:e[i]]`` for each ``i`` (a comprehension: cheaper than ``map(slice)``)."""
    return [data[a:b] for a, b in zip(s.tolist(), e.tolist(), strict=True)]


def _intern(keys: list[bytes]) -> tuple[list[bytes], np.ndarray]:
    """Distinct keys in first-seen order, and each key's index among them."""
    uniq = list(dict.fromkeys(keys))
    index = {k: i for i, k in enumerate(uniq)}
    return uniq, np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=len(keys))


def _intern_spans(
    data: bytes, base: int, buf: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[list[bytes], np.ndarray]:
    """``_intern`` of the byte strings ``buf[s:e]`` (``buf``: a padded copy of ``data`` from
    ``base``; non-empty, under 128 bytes): those equal to the first one are found in numpy (a
    per-node attr name repeats on every node)."""
    ln = e - s
    first = buf[s[0] : e[0]].tobytes()
    cand = np.flatnonzero(ln == len(first))
    got = buf[s[cand, None] + np.arange(len(first))]
    same = cand[(got == np.frombuffer(first, dtype=np.uint8)).all(1)]
    idx = np.full(len(s), -1, dtype=np.int64)
    idx[same] = 0
    rest = np.flatnonzero(idx < 0)
    if not rest.size:
        return [first], idx
    keys = _slices(data, s[rest] + base, e[rest] + base)
    uniq, ridx = _intern(keys)
    idx[rest] = ridx + 1
    return [first, *uniq], idx


def _section_pairs(key: bytes, cache: et_fast.AttrCache) -> tuple[tuple, bool]:
    """Derived ``(slot, value)`` pairs of a run of canonical attr fields, and True when no
    derived value is a list; raises what ``et_fast`` raises for a frame it hands on."""
    pos = 0
    end = len(key)
    pairs = []
    plain = True
    while pos < end:
        hit, pos = et_fast._one_attr(key, pos, end, cache)
        if hit[1] is not None:
            v = hit[0][2]
            pairs.append((hit[1], v))
            if type(v) is list:
                plain = False
    return tuple(pairs), plain


_HANDED_ON = (et_fast._Fallback, IndexError, UnicodeDecodeError, DecodeError, struct.error)


def decode_columns(
    data: bytes, pos: int, source: str, note: str = "", interner: Interner | None = None
) -> NodeColumns:
    """Decode every Node frame of ``data`` from ``pos`` into columns (see the module doc).

    ``interner``: shared by the files of one workload (their names and attrs repeat), so each
    distinct string is decoded once for all of them; by default one per call.

    Frames are decoded ``_BLOCK_FRAMES`` at a time (each block's bytes copied once, padded):
    the passes then run over arrays that stay in cache, and no copy of the whole file is made.
    """
    try:
        frames, ends = _split(data, pos)
    except _Unsplittable:
        # et_fast names the offset and the fault (truncated or corrupt length)
        et_fast.decode_nodes(data, pos, source, note)
        raise AssertionError("et_fast accepted frames the splitter rejects") from None
    n = len(frames)
    F = np.array(frames, dtype=np.int64)
    E = np.array(ends, dtype=np.int64)
    shared = interner if interner is not None else Interner()
    parts = [
        _decode_block(data, F[k : k + _BLOCK_FRAMES], E[k : k + _BLOCK_FRAMES], shared)
        for k in range(0, n, _BLOCK_FRAMES)
    ]

    def cat(i: int, dtype: Any, shape: tuple = (0,)) -> np.ndarray:
        got = [p[i] for p in parts]
        return np.concatenate(got) if got else np.zeros(shape, dtype=dtype)

    cols = NodeColumns(
        data=data,
        frame=F,
        id=cat(0, _U64),
        type=cat(1, np.uint8),
        name=cat(2, np.int32),
        names=shared.names,
        start_micros=cat(3, _U64),
        duration_micros=cat(4, _U64),
        ctrl_offsets=_cat_offsets([p[5] for p in parts]),
        ctrl_deps=cat(6, _U64),
        data_offsets=_cat_offsets([p[7] for p in parts]),
        data_deps=cat(8, _U64),
        inputs=cat(9, np.int64, (0, 2)),
        outputs=cat(10, np.int64, (0, 2)),
        attrs=cat(11, np.int64, (0, 2)),
        derived=cat(12, np.int32),
        derived_table=shared.table,
        zero=sum(p[14] for p in parts),
    )
    bad = cat(13, bool)
    for r in np.flatnonzero(bad).tolist():
        got, odd, _zero = et_fast.decode_nodes(data, frames[r], source, note, stop=ends[r])
        cols.fallback[r] = got[0]
        cols.odd += odd
    if cols.fallback:
        log.debug("%s: %d of %d node frames decoded one by one", source, len(cols.fallback), n)
    return cols


def _cat_offsets(parts: list[np.ndarray]) -> np.ndarray:
    """CSR offsets of blocks laid end to end."""
    out = [np.zeros(1, dtype=np.int64)]
    total = 0
    for off in parts:
        out.append(off[1:] + total)
        total += int(off[-1])
    return np.concatenate(out)


class BlockBuffer:
    """A padded copy of one block of frames, in one buffer kept for every block: a fresh
    block-sized array each time costs a page fault per 4 KiB (as much as the decoding's
    passes over it on a VM)."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=np.uint8)

    def fill(self, data: bytes, base: int, size: int) -> np.ndarray:
        """``data[base : base + size]`` followed by ``_PAD`` zero bytes (a view of the buffer,
        valid until the next ``fill``)."""
        if len(self._buf) < size + _PAD:
            self._buf = np.empty(size + _PAD + (size >> 3), dtype=np.uint8)
        buf = self._buf[: size + _PAD]
        buf[:size] = np.frombuffer(data, dtype=np.uint8, count=size, offset=base)
        buf[size:] = 0
        return buf


class Interner:
    """What the blocks of a file (and the files of a workload) intern together: node names,
    derived tuples and attr bodies; the columns of every file given one index into its lists."""

    def __init__(self) -> None:
        self.names: list[str] = [""]
        self.name_of: dict[bytes, int] = {}
        self.table: list[Derived] = [NO_DERIVED]
        self.where: dict[tuple, int] = {(NO_DERIVED, tuple(map(type, NO_DERIVED))): 0}
        self.cache = et_fast.AttrCache()
        #: runs of attr fields (bytes) -> index into section_pairs and section_derived
        self.sections: dict[bytes, int] = {}
        self.section_pairs: list[tuple] = []  # their derived (slot, value) pairs
        self.section_derived: list[int] = []  # their derived tuple's index in table, -1: hand on
        # ``section_derived`` as int64, grown by doubling: the array a block indexes
        self._section_array: np.ndarray = np.zeros(0, dtype=np.int64)
        self._section_filled = 0
        self.block = BlockBuffer()  # one buffer for every block of the workload's files

    def name_indices(self, keys: list[bytes]) -> list[int]:
        """The index of each node name in ``names`` (-1: not UTF-8); ``keys`` may repeat."""
        name_of = self.name_of
        got = list(map(name_of.get, keys))
        if None in got:
            names = self.names
            for key in dict.fromkeys([k for k, g in zip(keys, got, strict=True) if g is None]):
                try:
                    names.append(key.decode("utf-8"))
                    name_of[key] = len(names) - 1
                except UnicodeDecodeError:
                    name_of[key] = -1
            got = list(map(name_of.get, keys))
        return got  # type: ignore[return-value]

    def section_indices(self, keys: list[bytes]) -> np.ndarray:
        """The index of each run of attr fields in ``sections`` (each decoded once, in
        ``_section_pairs``); ``keys`` may repeat."""
        sections = self.sections
        got = list(map(sections.get, keys))
        if None in got:
            for key in dict.fromkeys([k for k, g in zip(keys, got, strict=True) if g is None]):
                sections[key] = self._add_section(key)
            got = list(map(sections.get, keys))
        return np.array(got, dtype=np.int64)

    def _add_section(self, key: bytes) -> int:
        try:
            pairs, plain = _section_pairs(key, self.cache)
        except _HANDED_ON:
            pairs, plain = (), False
        self.section_pairs.append(pairs)
        d = self.derived_index(et_fast._derived(list(pairs))[0]) if plain else -1
        self.section_derived.append(d)
        return len(self.section_derived) - 1

    def section_derived_array(self) -> np.ndarray:
        """``section_derived`` as an array (a view: read it before the next call)."""
        n, have = len(self.section_derived), self._section_filled
        if have != n:  # only what was added since: a whole copy per block was quadratic
            if n > len(self._section_array):
                grown = np.empty(max(n, 2 * len(self._section_array), 64), dtype=np.int64)
                grown[:have] = self._section_array[:have]
                self._section_array = grown
            self._section_array[have:n] = self.section_derived[have:n]
            self._section_filled = n
        return self._section_array[:n]

    def bound_sections(self, limit: int = _SECTIONS_KEPT) -> None:
        """Forget the attr sections once there are ``limit`` (called between blocks, whose
        indices are then all spent); derived tuples and names stay (columns index them)."""
        if len(self.sections) >= limit:
            self.sections.clear()
            self.section_pairs.clear()
            self.section_derived.clear()
            self._section_filled = 0

    def derived_index(self, d: Derived) -> int:
        """The index of derived tuple ``d`` in ``table`` (equal values of other types, such as
        0, 0.0 and False, are different tuples here: validation tells them apart)."""
        key = (d, tuple(map(type, d)))
        i = self.where.get(key)
        if i is None:
            i = self.where[key] = len(self.table)
            self.table.append(d)
        return i


def _decode_block(data: bytes, F: np.ndarray, E: np.ndarray, shared: Interner) -> tuple:
    """Columns of the frames at offsets ``F`` (ending at ``E``), spans as offsets in ``data``:
    (ids, types, names, starts, durations, ctrl offsets, ctrl deps, data offsets, data deps,
    inputs, outputs, attrs, derived, bad, zero-length frames)."""
    base = int(F[0])
    F = F - base
    E = E - base
    n = len(F)
    buf = shared.block.fill(data, base, int(E[-1]))  # offsets in buf: in data less ``base``
    S = F + 1  # body starts: after the length varint (up to 5 bytes; the splitter read it)
    cont = buf[F] >= 0x80
    for k in range(1, 5):
        if not cont.any():
            break
        S += cont
        cont &= buf[F + k] >= 0x80
    bad = np.zeros(n, dtype=bool)
    cur = S.copy()
    ids = np.zeros(n, dtype=_U64)
    types = np.zeros(n, dtype=np.uint8)
    st = np.zeros(n, dtype=_U64)
    du = np.zeros(n, dtype=_U64)
    name_span = np.full((n, 2), -1, dtype=np.int64)
    spans = {k: np.full((n, 2), -1, dtype=np.int64) for k in ("ctrl", "data", "in", "out")}

    def tag() -> np.ndarray:
        """The key byte at each frame's cursor (0 at its end); a field that ran past the end
        of its frame marks the frame bad (et_fast and protobuf judge it)."""
        over = cur > E
        if over.any():
            bad[over] = True
            cur[over] = E[over]
        t = buf[cur]
        t[cur >= E] = 0
        return t

    t = tag()
    for code, what in ((0x08, "id"), (0x12, "name"), (0x18, "type"), (0x22, "ctrl")):
        rows = np.flatnonzero(t == code)
        if rows.size:
            p = cur[rows] + 1
            if what == "id":
                v, q, ok = _varints(buf, p)
                ok &= v != 0
                ids[rows] = v
                cur[rows] = q
                bad[rows[~ok]] = True
            elif what == "type":
                tv = buf[p]
                bad[rows[(tv == 0) | (tv >= 0x80)]] = True
                types[rows] = tv
                cur[rows] = p + 1
            else:
                s, e = _lengths(buf, p, bad, rows)
                (name_span if what == "name" else spans[what])[rows] = np.stack([s, e], 1)
                cur[rows] = e
            t = tag()
    for code, what in ((0x2A, "data"), (0x30, "st"), (0x38, "du"), (0x42, "in"), (0x4A, "out")):
        rows = np.flatnonzero(t == code)
        if rows.size:
            p = cur[rows] + 1
            if what in ("st", "du"):
                v, q, ok = _varints(buf, p)
                ok &= v != 0
                (st if what == "st" else du)[rows] = v
                cur[rows] = q
                bad[rows[~ok]] = True
            else:  # an IOInfo of empty strings is an empty body (et_fast reads it so)
                s, e = _lengths(buf, p, bad, rows, empty=True)
                spans[what][rows] = np.stack([s, e], 1)
                cur[rows] = e
            t = tag()
    bad |= cur > E
    bad |= (cur < E) & (t != 0x52)
    for what in ("in", "out"):
        rows = np.flatnonzero((spans[what][:, 0] >= 0) & ~bad)
        if rows.size:
            _check_io(buf, spans[what][rows], rows, bad)
            _utf8_io(data, base, buf, spans[what], bad)
    ctrl_off, ctrl_vals = _packed_rows(buf, spans["ctrl"], n, bad)
    data_off, data_vals = _packed_rows(buf, spans["data"], n, bad)

    # node names: one str per distinct byte string
    rows = np.flatnonzero((name_span[:, 0] >= 0) & ~bad)
    name_idx = np.zeros(n, dtype=np.int32)
    if rows.size:
        keys = _slices(data, name_span[rows, 0] + base, name_span[rows, 1] + base)
        gi = np.array(shared.name_indices(keys), dtype=np.int32)
        bad[rows[gi < 0]] = True
        name_idx[rows] = np.maximum(gi, 0)

    attr_span = np.stack([cur, E], 1)
    derived = _attrs(data, buf, base, attr_span, bad, shared)

    for sp in (spans["in"], spans["out"]):
        np.add(sp, base, out=sp, where=sp >= 0)
    attr_span += base
    return (
        ids,
        types,
        name_idx,
        st,
        du,
        ctrl_off,
        ctrl_vals,
        data_off,
        data_vals,
        spans["in"],
        spans["out"],
        attr_span,
        derived,
        bad,
        int(np.count_nonzero(S == E)),
    )


def _packed_rows(
    buf: np.ndarray, span: np.ndarray, n: int, bad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the packed lists whose span is set (other rows, and bad ones, get none)."""
    rows = np.flatnonzero(span[:, 0] >= 0)
    offsets, vals = _packed(buf, span[rows], rows, n, bad)
    return offsets, vals


def _utf8_io(data: bytes, base: int, buf: np.ndarray, spans: np.ndarray, bad: np.ndarray) -> None:
    """Mark ``bad`` the rows whose IOInfo strings are not UTF-8; ``spans`` are offsets in
    ``buf`` (a padded copy of ``data`` from ``base``). A body without a byte >= 0x80 is ASCII:
    only the others are decoded."""
    rows = np.flatnonzero((spans[:, 0] < spans[:, 1]) & ~bad)  # set and not empty
    if not rows.size:
        return
    s, e = spans[rows, 0], spans[rows, 1]
    at = np.empty(2 * len(rows), dtype=np.int64)
    at[0::2] = s
    at[1::2] = e  # each span [s, e) one reduction (s < e); the gaps between are not used
    some = np.maximum.reduceat(buf, at)[0::2] >= 0x80
    s = s + base
    e = e + base
    for r, x, y in zip(rows[some].tolist(), s[some].tolist(), e[some].tolist(), strict=True):
        try:
            et_fast.decode_io(data[x:y])
        except UnicodeDecodeError:
            bad[r] = True


def _attrs(
    data: bytes, buf: np.ndarray, base: int, span: np.ndarray, bad: np.ndarray, shared: Interner
) -> np.ndarray:
    """Each row's derived tuple, as an index into a table of distinct ones; marks ``bad`` the
    rows whose attr fields the per-frame decoder must read. ``span``: offsets in ``buf`` (a
    padded copy of ``data`` from ``base``)."""
    n = len(span)
    derived = np.zeros(n, dtype=np.int32)
    s, e = span[:, 0], span[:, 1]
    rows = np.flatnonzero((s < e) & ~bad)
    if not rows.size:
        return derived
    p = s[rows]
    stop = e[rows]
    # a first attr "name + plain int64" (0x52 len 0x0A nl name 0x48 varint), read in numpy
    alen = buf[p + 1].astype(np.int64)
    nl = buf[p + 3].astype(np.int64)
    vp = p + 4 + nl
    fstop = p + 2 + alen
    simple = (
        (alen < 0x80)
        & (buf[p + 2] == 0x0A)
        & (nl > 0)
        & (nl < 0x80)
        & (fstop <= stop)
        & (vp < fstop - 1)
    )
    simple &= buf[np.where(simple, vp, p)] == 0x48
    v, q, ok = _varints(buf, np.where(simple, vp + 1, p))
    simple &= ok & (q == fstop) & (v < _U64(1 << 63))
    fs = rows[simple]
    whole = rows[~simple]
    # distinct first-attr names
    if fs.size:
        fp = p[simple]
        nuniq, nidx = _intern_spans(data, base, buf, fp + 4, vp[simple])
        slots: list[int | None] = []
        good = np.ones(len(nuniq), dtype=bool)
        for i, k in enumerate(nuniq):
            try:
                slots.append(et_fast._SLOT_OF_ATTR.get(k.decode("utf-8")))
            except UnicodeDecodeError:
                slots.append(None)
                good[i] = False
        bad[fs[~good[nidx]]] = True
    groups: list[tuple[Any, ...]] = []
    if fs.size:
        groups.append((fs, fstop[simple], nidx, slots, v[simple]))
    if whole.size:
        groups.append((whole, s[whole], None, None, None))
    shared.bound_sections()
    for grows, gstart, gnidx, gslots, gv in groups:
        keys = _slices(data, gstart + base, e[grows] + base)
        kidx = shared.section_indices(keys)  # each distinct run decoded once per workload
        di = shared.section_derived_array()[kidx]  # table index, -1: hand on
        bad[grows[di < 0]] = True
        if gslots is not None and any(x is not None for x in gslots):
            # the first attr sets a derived field: merge it with the rest's, row by row
            kpairs = shared.section_pairs
            sl = np.array([-1 if x is None else x for x in gslots], dtype=np.int64)[gnidx]
            for j in np.flatnonzero((sl >= 0) & (di >= 0)).tolist():
                merged = [(int(sl[j]), int(gv[j])), *kpairs[kidx[j]]]
                di[j] = shared.derived_index(et_fast._derived(merged)[0])
        derived[grows] = np.maximum(di, 0)
    return derived
