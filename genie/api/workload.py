"""``generate``: synthetic training steps as Chakra workloads, as ``genie workload generate``.

One spec per kind: ``Microbench`` (each collective type over a size sweep), ``DataParallel``
(gradient all-reduce buckets overlapping backward), ``Transformer`` (tensor, pipeline and data
parallelism, optional ZeRO), ``MixtureOfExperts`` (all-to-all, optionally skewed). ``target``
``astra-sim`` (the default) makes files ASTRA-sim 2.0 runs too (integer process groups, only
the collectives it runs); ``genie`` keeps readable group names and every collective type.
``generate`` returns the validated ``Workload`` and the notes on what the target changed;
``genie.workload.save_workload`` writes it. ``import_pytorch``: PyTorch's execution traces (and
Kineto's) as a workload, GPU kernels known only by their shapes priced by a roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from genie.api.specs import Spec
from genie.errors import UsageError
from genie.workload.model import CollectiveType, Workload

if TYPE_CHECKING:
    from genie.workload.pytorch_import import Imported

H100_BF16_FLOPS = 989e12
MAX_GENERATED_NODES = 20_000_000  # about 6 GB of memory while generating
Target = Literal["astra-sim", "genie"]


class Microbench(Spec, frozen=True, kw_only=True, tag="microbench"):
    """Each collective type over a size sweep (bytes), ``iterations`` times."""

    ranks: int
    sizes: tuple[int, ...] = (1 << 20,)
    types: tuple[str, ...] | None = None  # e.g. ("all_reduce",); ("all",); None: the defaults
    iterations: int = 1


class DataParallel(Spec, frozen=True, kw_only=True, tag="dp"):
    """A data-parallel step: gradient all-reduce buckets (bytes) overlapping backward."""

    ranks: int
    layers: int = 12
    hidden: int = 2048
    seq: int = 1024
    batch: int = 8
    bucket: int = 25 * 2**20
    peak_flops: float = H100_BF16_FLOPS
    efficiency: float = 0.5


class Transformer(Spec, frozen=True, kw_only=True, tag="llm"):
    """A transformer step with tensor (``tp``), pipeline (``pp``) and data parallelism."""

    ranks: int
    tp: int = 2
    pp: int = 2
    layers: int = 8
    hidden: int = 4096
    seq: int = 2048
    micro_batches: int = 4
    micro_batch_size: int = 1
    zero: bool = False
    peak_flops: float = H100_BF16_FLOPS
    efficiency: float = 0.5


class MixtureOfExperts(Spec, frozen=True, kw_only=True, tag="moe"):
    """A mixture-of-experts step; ``expert_skew``: Zipf exponent of expert popularity."""

    ranks: int
    layers: int = 4
    hidden: int = 2048
    seq: int = 2048
    batch: int = 4
    experts_per_rank: int = 2
    top_k: int = 2
    expert_skew: float = 0.0
    peak_flops: float = H100_BF16_FLOPS
    efficiency: float = 0.5


GenerateSpec = Microbench | DataParallel | Transformer | MixtureOfExperts


@dataclass
class Generated:
    """A generated, validated workload and what the target changed in it."""

    workload: Workload
    target: Target
    notes: list[str] = field(default_factory=list)


def estimated_nodes(spec: GenerateSpec) -> int:
    """An upper bound on the nodes the generator will build (checked before building)."""
    n = spec.ranks
    if isinstance(spec, Microbench):
        types = len(spec.types) if spec.types else 10
        return n * (len(spec.sizes) * types * spec.iterations + 1)
    if isinstance(spec, DataParallel):
        return n * (6 * spec.layers + 2)
    if isinstance(spec, Transformer):
        per_stage = -(-spec.layers // spec.pp)
        return n * (9 * spec.micro_batches * per_stage + 4 * per_stage + 4 * spec.micro_batches + 8)
    return n * (10 * spec.layers + 2)


def microbench_types(spec: Microbench, target: Target) -> tuple[list[CollectiveType], list[str]]:
    """The collective types asked for; for ASTRA-sim, those it runs (or a UsageError)."""
    from genie.workload.astra import RUNNABLE, why_not
    from genie.workload.generators.microbench import DEFAULT_TYPES

    astra = target == "astra-sim"
    if spec.types is None:
        if not astra:
            return list(DEFAULT_TYPES), []
        left = ", ".join(t.name.lower() for t in DEFAULT_TYPES if t not in RUNNABLE)
        return list(RUNNABLE), [f"--for astra-sim leaves out {left} (--for genie keeps them)"]
    names = [x.strip().upper() for x in spec.types if x.strip()]
    if names == ["ALL"]:
        return (list(RUNNABLE) if astra else list(CollectiveType)), []
    try:
        types = [CollectiveType[x] for x in names]
    except KeyError as exc:
        known = ", ".join(t.name.lower() for t in CollectiveType)
        raise UsageError(f"unknown collective type {exc.args[0]!r} (known: {known})") from None
    if astra:
        bad = [f"{t.name.lower()} (ASTRA-sim {why_not(t)})" for t in types if why_not(t)]
        if bad:
            raise UsageError(
                f"--for astra-sim: {'; '.join(bad)}; leave them out or give --for genie"
            )
    return types, []


def build(spec: GenerateSpec, target: Target, notes: list[str]) -> Workload:
    """Call the generator of ``spec``'s kind, unvalidated (``notes``: what ``target`` changed)."""
    from genie.workload.generators import data_parallel, llm, microbench, moe

    n = spec.ranks
    if isinstance(spec, Microbench):
        types, said = microbench_types(spec, target)
        notes.extend(said)
        return microbench(n, list(spec.sizes), types, spec.iterations)
    if isinstance(spec, DataParallel):
        return data_parallel(
            n,
            spec.layers,
            spec.hidden,
            spec.seq,
            spec.batch,
            bucket_bytes=spec.bucket,
            peak_flops=spec.peak_flops,
            efficiency=spec.efficiency,
        )
    if isinstance(spec, Transformer):
        dp = n // max(1, spec.tp * spec.pp)
        rs_ag = target == "astra-sim" and spec.tp > 1 and dp > 1 and not spec.zero
        if rs_ag:
            notes.append(
                "--for astra-sim: the DP gradient all-reduce is written as reduce-scatter "
                "+ all-gather (the same ring steps and bytes); ASTRA-sim 2.0 crashes when a rank "
                "runs all-reduce in both its TP and its DP group (--for genie keeps all-reduce)"
            )
        return llm(
            n,
            spec.tp,
            spec.pp,
            spec.layers,
            spec.hidden,
            spec.seq,
            spec.micro_batches,
            spec.micro_batch_size,
            zero=spec.zero,
            dp_sync="rs_ag" if rs_ag else "all_reduce",
            peak_flops=spec.peak_flops,
            efficiency=spec.efficiency,
        )
    if spec.expert_skew and target == "astra-sim":
        notes.append(
            "--for astra-sim: ASTRA-sim reads each rank's all-to-all as an even one of its "
            "own comm_size; genie reads the per-peer sizes (comm_split_sizes)"
        )
    return moe(
        n,
        spec.layers,
        spec.hidden,
        spec.seq,
        spec.batch,
        spec.experts_per_rank,
        spec.top_k,
        expert_skew=spec.expert_skew,
        peak_flops=spec.peak_flops,
        efficiency=spec.efficiency,
    )


def generate(spec: GenerateSpec, target: Target = "astra-sim") -> Generated:
    """Generate and validate the workload ``spec`` describes (see the module docstring)."""
    from genie import progress
    from genie.workload import validate_workload

    if spec.ranks < 1:
        raise UsageError(f"--ranks must be >= 1, got {spec.ranks}")
    est = estimated_nodes(spec)
    kind = type(spec).__struct_config__.tag
    if est > MAX_GENERATED_NODES:
        raise UsageError(
            f"{kind} with these options makes about {est:,} nodes, more than "
            f"{MAX_GENERATED_NODES:,}: use fewer ranks, layers or micro-batches"
        )
    notes: list[str] = []
    with progress.stage(f"generating {kind} for {spec.ranks} ranks"):
        wl = build(spec, target, notes)
    if target == "astra-sim":
        from genie.workload.astra import to_integer_groups

        to_integer_groups(wl)
    with progress.stage(f"validating {wl.node_count():,} nodes"):
        validate_workload(wl)
    if target == "astra-sim":
        from genie.workload.astra import astra_problems

        left = astra_problems(wl)
        if left:  # a generator that breaks ASTRA-sim's rules is a bug, not bad input
            raise RuntimeError(f"generated workload breaks ASTRA-sim's rules: {left}")
    return Generated(wl, target, notes)


def import_pytorch(
    hosts: list[str],
    kinetos: list[str] | None = None,
    ranks: int | None = None,
    device: str = "h100",
    name: str = "pytorch",
) -> Imported:
    """PyTorch host traces (and Kineto traces) as a workload
    (``genie.workload.pytorch_import.import_pytorch``); GPU nodes known only by their shapes
    priced by the roofline of ``device`` (a ``genie.calibration.compute.DEVICES`` key)."""
    from genie.calibration.compute import DEVICES, Roofline, apply, rewrite
    from genie.workload.pytorch_import import import_pytorch as read_traces

    if device not in DEVICES:
        raise UsageError(f"unknown device {device!r} (known: {', '.join(DEVICES)})")
    got = read_traces(hosts, kinetos, ranks, name)
    if got.shape_priced:
        roof = Roofline(*DEVICES[device], device=device)
        rw = rewrite(got.workload, roof)
        apply(got.workload, rw)
        got.notes.append(
            f"GPU durations from {roof.describe()} ({len(rw.durations)} kernels priced by their "
            "shapes); `genie calibrate compute` reprices them"
        )
    return got
