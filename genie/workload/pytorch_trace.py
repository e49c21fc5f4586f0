"""Read PyTorch's own trace files: the host execution trace and the Kineto device trace.

The host execution trace is the JSON ``torch.profiler.ExecutionTraceObserver`` writes: an object
with ``schema`` (``1.0.2-chakra.0.0.4`` ... ``1.1.1-chakra.0.0.4``), ``pid``, ``time``,
``start_ts``, ``finish_ts`` and ``nodes``, one per recorded operator: ``id``, ``name``,
``ctrl_deps`` (the calling operator's id; ``parent`` in older schemas), ``inputs`` and
``outputs`` (``values``, ``shapes``, ``types``, from 1.1 ``strides``; the oldest schema has
flat ``inputs`` lists beside ``input_shapes`` / ``input_types``) and ``attrs`` (``rf_id``,
``tid``, ``op_schema``, ...; older schemas have them as plain node fields). A tensor value is
``[tensor id, storage id, offset, elements, element bytes, device]``. Ids are handed out when an
operator starts, so ordering by id is the order each thread called them in.

The Kineto trace is the Chrome-trace JSON ``torch.profiler`` exports (``traceEvents``):
``cpu_op`` / ``user_annotation`` events carry the host operator's ``Record function id`` (the
host trace's ``rf_id``) and an ``External id``; a GPU event (``kernel``, ``gpu_memcpy``,
``gpu_memset``) carries its ``stream``, its duration and the ``External id`` of the operator
that launched it (also its ``correlation`` with the CUDA runtime call); NCCL kernels add
``Collective name``, ``In msg nelems``, ``dtype``, ``Process Group Name`` and ``Process Group
Ranks``. ``distributedInfo`` names the rank and world size.

Both readers take untrusted input: anything malformed is one ``WorkloadError`` line naming the
file (never a traceback); fields genie does not read are skipped and counted.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genie import progress
from genie.errors import WorkloadError
from genie.workload.et_codec import open_bytes

#: Host-trace schemas whose layout genie has read (others are read the same way, with a note).
KNOWN_SCHEMAS = (
    "1.0.1",
    "1.0.2-chakra.0.0.4",
    "1.0.3-chakra.0.0.4",
    "1.1.0-chakra.0.0.4",
    "1.1.1-chakra.0.0.4",
    "1.1.1-chakra.1.0.0",
)
_TOP = {"schema", "pid", "time", "start_ts", "finish_ts", "nodes"}
#: node fields read (the rest are counted and skipped)
_NODE_FIELDS = {
    "id",
    "name",
    "ctrl_deps",
    "parent",
    "inputs",
    "outputs",
    "attrs",
    "inclusive_dur",
    "exclusive_dur",
    "input_shapes",
    "input_types",
    "output_shapes",
    "output_types",
}
#: node fields read as attrs when an old schema has them at the top of the node
_ATTR_FIELDS = {"rf_id", "tid", "fw_parent", "seq_id", "scope", "fw_tid", "op_schema"}
#: attrs genie uses; other attrs are kept off the output without a note (they are many, stable)
_GPU_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))
_CPU_CATS = frozenset(("cpu_op", "user_annotation"))
_RUNTIME_CATS = frozenset(("cuda_runtime", "cuda_driver", "hip_runtime"))
_NEST_LIMIT = 12


@dataclass
class HostOp:
    """One operator of the host trace (what genie reads of it)."""

    id: int
    name: str
    parent: int | None
    tid: int
    rf_id: int | None
    in_values: list[Any]
    in_types: list[str]
    in_shapes: list[Any]
    out_values: list[Any]
    out_types: list[str]
    out_shapes: list[Any]
    inclusive_us: float | None = None
    exclusive_us: float | None = None


@dataclass
class HostTrace:
    """A host execution trace: its header and operators in id order."""

    path: str
    schema: str
    header: dict[str, Any]
    ops: list[HostOp]
    problems: list[str] = field(default_factory=list)


@dataclass
class GpuEvent:
    """One GPU event of a Kineto trace."""

    name: str
    cat: str
    ts: float
    dur: float
    stream: int | None
    external_id: int | None
    correlation: int | None
    args: dict[str, Any]


@dataclass
class KinetoTrace:
    """What genie reads of a Kineto trace."""

    path: str
    rank: int | None
    world_size: int | None
    cpu_dur: dict[int, float]  # rf_id -> duration (us)
    gpu: list[GpuEvent]
    ext_to_rf: dict[int, int]  # External id of a cpu_op -> its rf_id
    launcher: dict[int, int]  # correlation -> rf_id of the op enclosing the runtime call
    problems: list[str] = field(default_factory=list)


def _load_json(path: Path, what: str) -> Any:
    """The decoded JSON of ``path`` (gzip read too), or one WorkloadError line."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read {what}: {exc.strerror}") from None
    with progress.stage(f"parsing {path.name} ({size / 2**20:.1f} MiB)"):
        try:
            data, _note = open_bytes(path)
            return json.loads(data)
        except WorkloadError:
            raise
        except OSError as exc:
            raise WorkloadError(f"{path}: cannot read {what}: {exc}") from None
        except UnicodeDecodeError:
            raise WorkloadError(f"{path}: not a {what}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}: not a {what}: invalid JSON at line {exc.lineno} column {exc.colno} "
                f"({exc.msg})"
            ) from None
        except (RecursionError, MemoryError, ValueError) as exc:
            raise WorkloadError(f"{path}: not a {what}: {type(exc).__name__}") from None


def _int(v: Any, what: str, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise WorkloadError(f"{where}: {what} {str(v)[:40]!r} is not a whole number")
    return v


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _io(d: dict, key: str, flat_shapes: str, flat_types: str) -> tuple[list, list, list]:
    """(values, types, shapes) of a node's ``inputs``/``outputs`` in any schema's layout."""
    v = d.get(key)
    if isinstance(v, dict):
        values, types, shapes = v.get("values", []), v.get("types", []), v.get("shapes", [])
    else:  # schema 1.0.1: flat lists beside input_shapes / input_types
        values, types, shapes = v, d.get(flat_types, []), d.get(flat_shapes, [])
    values = values if isinstance(values, list) else []
    types = [t if isinstance(t, str) else "" for t in types] if isinstance(types, list) else []
    shapes = shapes if isinstance(shapes, list) else []
    return values, types, shapes


def read_host_et(path: str | Path) -> HostTrace:
    """Read one host execution trace (see the module docstring)."""
    p = Path(path)
    doc = _load_json(p, "PyTorch host execution trace")
    if type(doc) is not dict or type(doc.get("nodes")) is not list:
        shape = "a JSON object" if type(doc) is dict else f"JSON {type(doc).__name__}"
        raise WorkloadError(
            f"{p}: not a PyTorch host execution trace ({shape} without a 'nodes' list; "
            "expected what torch.profiler.ExecutionTraceObserver writes)"
        )
    schema = doc.get("schema")
    schema = schema if isinstance(schema, str) else ""
    problems: list[str] = []
    if schema not in KNOWN_SCHEMAS:
        problems.append(
            f"{p}: schema {schema[:40]!r} is not one genie has read "
            f"({', '.join(KNOWN_SCHEMAS)}); read with the newest layout"
        )
    extra_top = sorted(k for k in doc if k not in _TOP)
    if extra_top:
        problems.append(f"{p}: skipped top-level field(s) {', '.join(extra_top[:8])}")
    header = {k: doc[k] for k in ("schema", "pid", "time", "start_ts", "finish_ts") if k in doc}
    unknown: Counter[str] = Counter()
    ops: list[HostOp] = []
    seen: set[int] = set()
    nodes = doc["nodes"]
    with progress.bar(f"reading {p.name}", len(nodes), "nodes") as bar:
        for k, d in enumerate(nodes):
            where = f"{p}: nodes[{k}]"
            if type(d) is not dict:
                raise WorkloadError(f"{where} is not an object")
            op = _host_op(d, where, unknown)
            if op.id in seen:
                raise WorkloadError(f"{where}: id {op.id} appears twice")
            seen.add(op.id)
            ops.append(op)
            if k % 4096 == 4095:
                bar.advance(4096)
        bar.advance(len(nodes) % 4096)
    if unknown:
        what = ", ".join(f"{n} ({c} nodes)" for n, c in sorted(unknown.items())[:12])
        problems.append(f"{p}: skipped node field(s) genie does not read: {what}")
    ops.sort(key=lambda o: o.id)
    return HostTrace(str(p), schema, header, ops, problems)


def _host_op(d: dict, where: str, unknown: Counter[str]) -> HostOp:
    if "id" not in d:
        raise WorkloadError(f"{where}: no id")
    nid = _int(d["id"], "id", where)
    name = d.get("name", "")
    if not isinstance(name, str):
        raise WorkloadError(f"{where}: name is not a string")
    attrs: dict[str, Any] = {k: d[k] for k in _ATTR_FIELDS if k in d}
    raw_attrs = d.get("attrs", [])
    if isinstance(raw_attrs, list):
        for a in raw_attrs:
            if isinstance(a, dict) and isinstance(a.get("name"), str):
                attrs[a["name"]] = a.get("value")
    for key in d:
        if key not in _NODE_FIELDS and key not in _ATTR_FIELDS:
            unknown[key] += 1
    parent = d.get("ctrl_deps", d.get("parent"))
    in_v, in_t, in_s = _io(d, "inputs", "input_shapes", "input_types")
    out_v, out_t, out_s = _io(d, "outputs", "output_shapes", "output_types")
    incl, excl = d.get("inclusive_dur"), d.get("exclusive_dur")
    return HostOp(
        id=nid,
        name=name[:1000],
        parent=_opt_int(parent),
        tid=_opt_int(attrs.get("tid")) or 0,
        rf_id=_opt_int(attrs.get("rf_id")),
        in_values=in_v,
        in_types=in_t,
        in_shapes=in_s,
        out_values=out_v,
        out_types=out_t,
        out_shapes=out_s,
        inclusive_us=float(incl) if isinstance(incl, int | float) and incl >= 0 else None,
        exclusive_us=float(excl) if isinstance(excl, int | float) and excl >= 0 else None,
    )


def read_kineto(path: str | Path) -> KinetoTrace:
    """Read one Kineto (Chrome) trace (see the module docstring)."""
    p = Path(path)
    doc = _load_json(p, "Kineto trace")
    if type(doc) is not dict or type(doc.get("traceEvents")) is not list:
        raise WorkloadError(
            f"{p}: not a Kineto trace (expected a JSON object with a 'traceEvents' list, as "
            "torch.profiler's export_chrome_trace writes)"
        )
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    out = KinetoTrace(
        str(p), _opt_int(info.get("rank")), _opt_int(info.get("world_size")), {}, [], {}, {}
    )
    cpu: dict[int, list[tuple[float, float, int]]] = {}  # tid -> (start, end, rf_id)
    runtime: dict[int, tuple[int, float]] = {}  # correlation -> (tid, ts)
    bad = 0
    events = doc["traceEvents"]
    with progress.bar(f"reading {p.name}", len(events), "events") as bar:
        for k, e in enumerate(events):
            if k % 4096 == 4095:
                bar.advance(4096)
            if type(e) is not dict or e.get("ph") != "X":
                continue
            args = e.get("args")
            args = args if isinstance(args, dict) else {}
            cat, ts, dur = e.get("cat"), e.get("ts"), e.get("dur", 0)
            if not isinstance(ts, int | float) or not isinstance(dur, int | float) or dur < 0:
                bad += 1
                continue
            if cat in _CPU_CATS:
                rf = _opt_int(args.get("Record function id"))
                ext = _opt_int(args.get("External id"))
                if rf is None:
                    continue
                out.cpu_dur[rf] = float(dur)
                if ext is not None:
                    out.ext_to_rf.setdefault(ext, rf)
                tid = _opt_int(e.get("tid")) or 0
                cpu.setdefault(tid, []).append((float(ts), float(ts) + float(dur), rf))
            elif cat in _RUNTIME_CATS:
                corr = _opt_int(args.get("correlation"))
                if corr is not None:
                    runtime[corr] = (_opt_int(e.get("tid")) or 0, float(ts))
            elif cat in _GPU_CATS:
                name = e.get("name", "")
                out.gpu.append(
                    GpuEvent(
                        name=name[:1000] if isinstance(name, str) else "",
                        cat=str(cat),
                        ts=float(ts),
                        dur=float(dur),
                        stream=_opt_int(args.get("stream")),
                        external_id=_opt_int(args.get("External id")),
                        correlation=_opt_int(args.get("correlation")),
                        args=args,
                    )
                )
        bar.advance(len(events) % 4096)
    out.gpu.sort(key=lambda g: g.ts)
    out.launcher = _enclosing(cpu, runtime)
    if bad:
        out.problems.append(f"{p}: skipped {bad} event(s) without a numeric ts/dur")
    return out


def _enclosing(
    cpu: dict[int, list[tuple[float, float, int]]], runtime: dict[int, tuple[int, float]]
) -> dict[int, int]:
    """correlation -> rf_id of the innermost CPU op on the runtime call's thread enclosing it."""
    out: dict[int, int] = {}
    starts: dict[int, list[float]] = {}
    for tid, tspans in cpu.items():
        tspans.sort()
        starts[tid] = [s for s, _, _ in tspans]
    for corr, (tid, ts) in runtime.items():
        if not cpu.get(tid):
            continue
        spans = cpu[tid]
        i = bisect.bisect_right(starts[tid], ts) - 1
        for j in range(i, max(-1, i - 64), -1):  # the latest-starting op that still covers ts
            s, e, rf = spans[j]
            if s <= ts <= e:
                out[corr] = rf
                break
    return out


# ------------------------------------------------------------------------------ tensors

_DEVICE = re.compile(r"^(cuda|hip|xpu|mps|cpu|meta|privateuseone)(:\d+)?$")


def is_tensor(v: Any) -> bool:
    """Whether a value is the host trace's tensor form ``[id, storage, offset, n, bytes, dev]``."""
    return (
        type(v) is list
        and len(v) == 6
        and all(type(x) is int for x in v[:5])
        and isinstance(v[5], str)
    )


def tensors(v: Any, depth: int = 0) -> list[list]:
    """Every tensor in a (nested) value, in order."""
    if is_tensor(v):
        return [v]
    if type(v) is list and depth < _NEST_LIMIT:
        out: list[list] = []
        for x in v:
            out += tensors(x, depth + 1)
        return out
    return []


def nbytes(v: Any) -> int:
    """Bytes of every tensor in a (nested) value (elements x element bytes)."""
    return sum(max(0, t[3]) * max(0, t[4]) for t in tensors(v))
