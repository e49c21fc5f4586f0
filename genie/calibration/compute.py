"""Compute calibration: a trace's compute durations from its shapes, timed or from the roofline.

Each compute node gets a list of operations:

* GEMMs, from the node's attributes (``gemm_m``, ``gemm_n``, ``gemm_k``, optional
  ``gemm_count``) or, for traces of ``genie workload generate llm``, from the model's dimensions
  recorded in the trace (hidden, seq, micro-batch size, TP): attention = QKV and output
  projections plus the score and context products, MLP = its two projections; a backward half
  is each forward GEMM twice (input and weight gradients), with the shapes transposed;
* otherwise one roofline operation from the node's ``num_ops`` / ``tensor_size`` (an
  element-wise or unknown kernel);
* nodes with neither keep their trace duration.

A ``Timer`` prices one GEMM shape: ``torch_timer`` runs it on the local accelerator with PyTorch
(median of timed repetitions after warm-up, bf16) when both are there; ``Roofline`` prices it
as max(FLOPs / (peak x efficiency), bytes / memory bandwidth) otherwise, and the report says
which priced what. ``rewrite`` returns the new durations; the command writes them to new files.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from genie.errors import CalibrationError

#: device -> (dense bf16 FLOP/s, memory bytes/s), from NVIDIA's datasheets (SXM parts)
DEVICES = {
    "h100": (989e12, 3.35e12),
    "h200": (989e12, 4.8e12),
    "a100": (312e12, 2.039e12),
}


@dataclass(frozen=True)
class Gemm:
    """One matrix product C[m, n] = A[m, k] B[k, n] (``batch`` of them), ``dtype`` bytes each."""

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: int = 2

    @property
    def flops(self) -> float:
        """Floating-point operations (a multiply-add is two)."""
        return 2.0 * self.m * self.n * self.k * self.batch

    @property
    def bytes(self) -> float:
        """Bytes read and written at least once."""
        return float(self.m * self.k + self.k * self.n + self.m * self.n) * self.dtype * self.batch

    def label(self) -> str:
        """e.g. ``8x[2048x4096 @ 4096x6144]``."""
        core = f"{self.m}x{self.k} @ {self.k}x{self.n}"
        return f"{self.batch}x[{core}]" if self.batch > 1 else core


@dataclass(frozen=True)
class Opaque:
    """An operation known only by its FLOPs and bytes (roofline only)."""

    flops: float
    bytes: float

    def label(self) -> str:
        """e.g. ``1.2e+09 FLOP, 3.4e+07 B``."""
        return f"{self.flops:.3g} FLOP, {self.bytes:.3g} B"


Op = Gemm | Opaque


@dataclass
class Roofline:
    """max(FLOPs / (peak x efficiency), bytes / memory bandwidth)."""

    peak_flops: float
    memory_bandwidth: float
    efficiency: float = 1.0
    device: str = ""

    def __call__(self, op: Op) -> float:
        return max(op.flops / (self.peak_flops * self.efficiency), op.bytes / self.memory_bandwidth)

    def describe(self) -> str:
        """What priced the numbers, in words."""
        name = f"{self.device} " if self.device else ""
        return (
            f"the roofline of {name}({self.peak_flops / 1e12:.0f} TFLOP/s x "
            f"{self.efficiency:.0%}, {self.memory_bandwidth / 1e12:.2f} TB/s)"
        )


Timer = Callable[[Gemm], float]


def torch_timer(reps_s: float = 0.05, max_reps: int = 200) -> tuple[Timer, str] | None:
    """A timer of GEMMs on the local accelerator with PyTorch, and its name; None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)

    def run(g: Gemm) -> float:
        a = torch.randn(g.batch, g.m, g.k, dtype=torch.bfloat16, device=dev)
        b = torch.randn(g.batch, g.k, g.n, dtype=torch.bfloat16, device=dev)
        for _ in range(3):
            torch.bmm(a, b)
        torch.cuda.synchronize()
        times: list[float] = []
        spent = 0.0
        while spent < reps_s and len(times) < max_reps:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.bmm(a, b)
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3
            times.append(t)
            spent += t
        return statistics.median(times)

    return run, f"PyTorch {torch.__version__} on {name} (bf16, median of timed runs)"


# ---- shapes of a trace's compute nodes ---------------------------------------------------

_LLM = re.compile(r"^(?P<dir>fwd|bwd)_L\d+_(?P<half>attn|mlp)_mb\d+$")


def llm_dims(wl: Any) -> dict[str, int] | None:
    """hidden, seq, micro_batch_size, tp of a ``genie llm`` trace (from its metadata), or None."""
    for rg in wl.ranks[:1]:
        attrs = getattr(rg.metadata, "attrs", None) or []
        for a in attrs:
            if a.name == "generator" and str(a.value).startswith("genie llm"):
                kv = dict(re.findall(r"(\w+)=([\w.]+)", str(a.value)))
                try:
                    return {
                        "hidden": int(kv["hidden"]),
                        "seq": int(kv["seq"]),
                        "micro_batch_size": int(kv["micro_batch_size"]),
                        "tp": int(kv["tp"]),
                    }
                except (KeyError, ValueError):
                    return None
    return None


def llm_gemms(dims: dict[str, int], direction: str, half: str, dtype: int = 2) -> list[Gemm]:
    """The GEMMs of one half-block of the llm generator's transformer, per TP shard."""
    h, s, b, tp = dims["hidden"], dims["seq"], dims["micro_batch_size"], dims["tp"]
    t = b * s  # tokens
    if half == "attn":
        fwd = [
            Gemm(t, 3 * h // tp, h, dtype=dtype),  # QKV projection
            Gemm(s, s, h // tp, batch=b, dtype=dtype),  # scores Q K^T (heads merged)
            Gemm(s, h // tp, s, batch=b, dtype=dtype),  # context P V
            Gemm(t, h, h // tp, dtype=dtype),  # output projection
        ]
    else:
        fwd = [Gemm(t, 4 * h // tp, h, dtype=dtype), Gemm(t, h, 4 * h // tp, dtype=dtype)]
    if direction == "fwd":
        return fwd
    out = []
    for g in fwd:  # input gradient dA = dC B^T, weight gradient dB = A^T dC
        out.append(Gemm(g.m, g.k, g.n, g.batch, g.dtype))
        out.append(Gemm(g.k, g.n, g.m, g.batch, g.dtype))
    return out


def _attr(node: Any, name: str) -> Any:
    for a in node.attrs or []:
        if a.name == name:
            return a.value
    return None


def node_ops(node: Any, dims: dict[str, int] | None) -> tuple[Sequence[Op], str]:
    """(operations, where they came from) of one compute node; [] keeps its duration."""
    m, n, k = (_attr(node, f"gemm_{x}") for x in "mnk")
    if m and n and k:
        count = int(_attr(node, "gemm_count") or 1)
        return [Gemm(int(m), int(n), int(k), batch=count)], "attrs"
    match = _LLM.match(node.name or "")
    if match and dims:
        return llm_gemms(dims, match["dir"], match["half"]), "model dims"
    flops, size = _attr(node, "num_ops"), _attr(node, "tensor_size")
    if flops or size:
        return [Opaque(float(flops or 0), float(size or 0))], "num_ops/tensor_size"
    return [], "kept"


@dataclass
class Rewrite:
    """New durations per (rank, node id), and per distinct shape what priced it."""

    durations: dict[tuple[int, int], float] = field(default_factory=dict)
    old: dict[tuple[int, int], float] = field(default_factory=dict)
    shapes: dict[Op, dict[str, Any]] = field(default_factory=dict)  # op -> count, times
    sources: dict[str, int] = field(default_factory=dict)  # where ops came from -> nodes
    timer: str = ""
    roofline: str = ""

    def totals(self) -> tuple[float, float]:
        """Sum of old and new durations over every rewritten node (seconds)."""
        return sum(self.old.values()), sum(self.durations.values())


def rewrite(wl: Any, roofline: Roofline, timer: tuple[Timer, str] | None = None) -> Rewrite:
    """Price every compute node of ``wl`` (see the module docstring); nothing is changed."""
    from genie.workload.model import NodeType

    dims = llm_dims(wl)
    out = Rewrite(timer=timer[1] if timer else "", roofline=roofline.describe())
    time_of: dict[Op, float] = {}
    for rg in wl.ranks:
        for node in rg.nodes:
            if int(node.type) != int(NodeType.COMP_NODE):
                continue
            ops, source = node_ops(node, dims)
            out.sources[source] = out.sources.get(source, 0) + 1
            if not ops:
                continue
            total = 0.0
            for op in ops:
                if op not in time_of:
                    roof = roofline(op)
                    timed = timer[0](op) if timer and isinstance(op, Gemm) else None
                    if timed is not None and not (math.isfinite(timed) and timed > 0):
                        raise CalibrationError(f"timing {op.label()} gave {timed!r}")
                    time_of[op] = timed if timed is not None else roof
                    out.shapes[op] = {"count": 0, "roofline_s": roof, "timed_s": timed}
                out.shapes[op]["count"] += 1
                total += time_of[op]
            key = (rg.rank, node.id)
            out.durations[key] = total
            out.old[key] = node.duration_micros * 1e-6
    return out


def apply(wl: Any, rw: Rewrite) -> None:
    """Write the new durations into ``wl``'s nodes (microseconds, at least 1 when nonzero)."""
    for rg in wl.ranks:
        for node in rg.nodes:
            t = rw.durations.get((rg.rank, node.id))
            if t is not None:
                node.duration_micros = max(1, round(t * 1e6)) if t > 0 else 0
