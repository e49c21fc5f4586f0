"""``calibrate`` and ``calibrate_compute``: fit the cost model to bench runs; price compute.

``calibrate(CalibrateSpec)`` is ``genie calibrate RUN...``: the measured points of the runs
(one per program and size, the median of its measured iterations; ``genie.calibration.runs``),
part of them held back (``holdout``), the fit (``genie.calibration.fit``) and the model's error
(MAPE) on the held-back and the fit points, nominal and calibrated. With ``save`` the
calibration is stored with the testbed in the run store (its ``cal_id`` set), for ``Fabric
(calibration=ID)``, ``EmulateSpec.calibration`` and ``BenchSpec.calibration``. The result's
``to_dict()`` is what ``genie calibrate --json`` prints. The calibration records the identity
of the fabric it was fitted on and the runs' wire conditions (it is applied only where both
match), whether it is offered for ``--calibration latest`` and why. ``validate``: other runs
(another topology or size range) the fitted parameters are judged on beside nominal, nothing
fitted on them (``Calibration.validation``).

``calibrate_compute(CalibrateComputeSpec)`` is ``genie calibrate compute PREFIX --out NEW``: a
workload's compute durations from its shapes (timed with PyTorch on a local accelerator when
there is one, else the roofline; the result says which), written as new files, never in place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from genie import progress
from genie.api.specs import Spec, bandwidth
from genie.calibration.compute import DEVICES, Gemm, Rewrite, Roofline, apply, rewrite, torch_timer
from genie.calibration.fit import Point, assign_holdout, fit, price_points
from genie.calibration.model import Calibration, identity
from genie.calibration.runs import bucket_note, run_points
from genie.errors import StoreError, UsageError
from genie.store import DEFAULT_STORE, RunInfo, RunStore
from genie.wire.conditions import Conditions, conditions_of, differences, flatten
from genie.workload import load_workload, save_workload
from genie.workload.loader import find_rank_files

JsonDoc = dict[str, object]
HOLDOUTS: tuple[str, ...] = ("alternate", "largest", "none")


class CalibrateSpec(Spec, frozen=True, kw_only=True):
    """Fit the cost model to the bench runs ``runs`` (ids or unique prefixes) of ``store``.

    ``holdout``: the points not fitted, to measure the error on: every other size of each series
    (``alternate``), the largest quarter (``largest``) or none. ``save``: store the calibration.
    ``mix_conditions``: pool runs whose recorded conditions (congestion control, buffers, MTU,
    qdisc, kernel, ...) differ; refused otherwise, naming what differs. ``validate``: runs
    (of any testbed) to report the fitted model's error on, beside nominal.
    """

    runs: tuple[str, ...]
    store: str = DEFAULT_STORE
    holdout: Literal["alternate", "largest", "none"] = "alternate"
    save: bool = True
    mix_conditions: bool = False
    validate: tuple[str, ...] = ()


def calibrate(spec: CalibrateSpec) -> Calibration:
    """Fit, judge and (with ``spec.save``) store a calibration (see the module docstring)."""
    if not spec.runs:
        raise UsageError("no runs to calibrate on: give the id of at least one bench run")
    path = Path(spec.store)
    if not path.is_file():
        raise StoreError(f"no run store at {path} (runs are recorded by genie bench; --store)")
    points: list[Point] = []
    infos: list[RunInfo] = []
    checks: list[tuple[RunInfo, list[Point]]] = []
    with RunStore(path) as st:
        for rid in spec.runs:
            info, pts = run_points(st, rid)
            infos.append(info)
            points.extend(pts)
        for rid in spec.validate:
            checks.append(run_points(st, rid))
    names = sorted({i.testbed_name for i in infos})
    if len(names) > 1:
        raise UsageError(
            f"the runs are of different testbeds ({', '.join(names)}): a calibration is of one"
        )
    if not spec.mix_conditions:
        first = conditions_of(infos[0].meta)
        for info in infos[1:]:
            diff = differences(first, conditions_of(info.meta))
            if diff:
                raise UsageError(
                    f"runs {infos[0].run_id} and {info.run_id} ran under different conditions "
                    f"({'; '.join(diff[:3])}{'; ...' if len(diff) > 3 else ''}): a calibration "
                    "pools like with like (--mix-conditions to pool them anyway)"
                )
    rule = assign_holdout(points, spec.holdout)
    run_ids = [i.run_id for i in infos]
    with progress.stage(f"fitting the model to {len(points)} measured points") as stage:
        result = fit(
            points,
            testbed_name=names[0],
            runs=run_ids,
            holdout=rule,
            on_iteration=lambda k: stage.describe(f"fitting: iteration {k + 1}"),
        )
    cal = result.calibration
    cal.notes += [n for n in (bucket_note(i, points) for i in infos) if n]
    cal.identity = identity(points[0].topology)
    cal.conditions = flatten(conditions_of(infos[0].meta))
    if checks:
        cal.validation = validate(cal, checks, conditions_of(infos[0].meta))
    if spec.save:
        with RunStore(path) as st:
            cal.cal_id = st.add_calibration(
                cal.to_dict(),
                testbed_name=names[0],
                testbed_text=infos[0].testbed,
                runs=run_ids,
            )
    return cal


def validate(
    cal: Calibration, checks: list[tuple[RunInfo, list[Point]]], fitted: Conditions
) -> JsonDoc:
    """The fitted parameters on other runs (nothing fitted on them): error beside nominal."""
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    errs: dict[str, list[float]] = {"nominal": [], "calibrated": []}
    for info, pts in checks:
        price_points(cal, pts)
        for p in pts:
            nom, got = p.nominal_s or 0.0, p.calibrated_s or 0.0
            errs["nominal"].append(abs(nom / p.measured_s - 1) * 100)
            errs["calibrated"].append(abs(got / p.measured_s - 1) * 100)
            rows.append(
                {
                    "run": info.run_id,
                    "testbed": info.testbed_name,
                    "label": p.label,
                    "size": p.size,
                    "measured_s": p.measured_s,
                    "nominal_s": nom,
                    "calibrated_s": got,
                }
            )
        diff = differences(fitted, conditions_of(info.meta))
        if diff:
            notes.append(
                f"run {info.run_id} ran under other conditions than the fit runs "
                f"({'; '.join(diff[:3])}{'; ...' if len(diff) > 3 else ''})"
            )

    def mape_of(key: str) -> float | None:
        return sum(errs[key]) / len(errs[key]) if errs[key] else None

    return {
        "runs": [i.run_id for i, _ in checks],
        "testbeds": sorted({i.testbed_name for i, _ in checks}),
        "points": len(rows),
        "nominal_mape": mape_of("nominal"),
        "calibrated_mape": mape_of("calibrated"),
        "rows": rows,
        "notes": notes,
    }


class CalibrateComputeSpec(Spec, frozen=True, kw_only=True):
    """Rewrite the compute durations of the workload ``workload`` into new files at ``out``.

    ``device``: the roofline preset (``h100``, ``h200``, ``a100``; default h100), whose peak
    FLOP/s, memory bandwidth and efficiency ``peak_flops``, ``memory_bandwidth`` (bytes/s or
    ``"3.35TB/s"``) and ``efficiency`` override. ``use_accelerator``: time the GEMMs with
    PyTorch on a local accelerator when there is one (False: the roofline only).
    """

    workload: str
    out: str
    device: str | None = None
    peak_flops: float | None = None
    memory_bandwidth: float | str | None = None
    efficiency: float | None = None
    use_accelerator: bool = True


@dataclass(frozen=True)
class PricedOp:
    """One distinct compute operation of a workload and what priced it."""

    operation: str  # its shape: "2048x4096 @ 4096x6144", or "1.2e+09 FLOP, 3.4e+07 B"
    gemm: bool  # a GEMM (a timer may time it) or a roofline-only operation
    nodes: int  # compute nodes that run it
    flops: float
    roofline_s: float
    timed_s: float | None  # None: not timed (no accelerator, or not a GEMM)


@dataclass
class ComputeCalibration:
    """What ``calibrate_compute`` priced and wrote (``to_dict()``: the same as data)."""

    workload: str  # the workload's name
    n_ranks: int
    out: Path  # the new prefix
    files: list[Path]  # the rank files written
    rewrite: Rewrite  # new durations and, per distinct operation, what priced it
    timed: bool  # an accelerator timed the GEMMs (else the roofline priced everything)

    def operations(self) -> list[PricedOp]:
        """Per distinct operation, the most compute first."""
        shapes = sorted(
            self.rewrite.shapes.items(), key=lambda kv: -kv[1]["roofline_s"] * kv[1]["count"]
        )
        return [
            PricedOp(
                op.label(),
                isinstance(op, Gemm),
                d["count"],
                op.flops,
                d["roofline_s"],
                d["timed_s"],
            )
            for op, d in shapes
        ]

    def per_rank_s(self) -> tuple[float, float]:
        """Mean compute per rank (seconds) in the trace and now."""
        old, now = self.rewrite.totals()
        per = max(1, self.n_ranks)
        return old / per, now / per

    def to_dict(self) -> JsonDoc:
        """The calibration of compute as JSON-ready data (seconds, FLOPs)."""
        before, after = self.per_rank_s()
        return {
            "workload": self.workload,
            "n_ranks": self.n_ranks,
            "out": str(self.out),
            "files": [str(f) for f in self.files],
            "timer": self.rewrite.timer or None,
            "roofline": self.rewrite.roofline,
            "sources": dict(sorted(self.rewrite.sources.items())),
            "operations": [dataclasses.asdict(op) for op in self.operations()],
            "compute_per_rank_s": {"trace": before, "now": after},
            "nodes_rewritten": len(self.rewrite.durations),
        }


def out_prefix(src: Path, out: str) -> Path:
    """The new prefix: never the input's, never over existing rank files."""
    if not out:
        raise UsageError(
            "genie calibrate compute needs --out NEW_PREFIX (files are never rewritten in place)"
        )
    new = Path(out)
    prefix, _ = find_rank_files(src)
    if new.resolve() == prefix.resolve():
        raise UsageError(f"--out {out} is the input's own prefix: choose a new one")
    clash = sorted(new.parent.glob(f"{new.name}.*.et*")) if new.parent.is_dir() else []
    if clash:
        raise UsageError(f"{clash[0]} exists: choose a new --out prefix (nothing is overwritten)")
    return new


def roofline(spec: CalibrateComputeSpec) -> Roofline:
    """The roofline ``spec`` describes: its device's preset, with the numbers it overrides."""
    device = (spec.device or "h100").lower()
    if device not in DEVICES:
        raise UsageError(f"--device {spec.device!r}: one of {', '.join(DEVICES)}")
    peak, mem = DEVICES[device]
    given = bandwidth(spec.memory_bandwidth) if spec.memory_bandwidth is not None else None
    return Roofline(
        spec.peak_flops or peak,
        given or mem,
        spec.efficiency or 1.0,
        device if not (spec.peak_flops or given) else "",
    )


def calibrate_compute(spec: CalibrateComputeSpec) -> ComputeCalibration:
    """Price the workload's compute nodes and write them to new files (see the module)."""
    src = Path(spec.workload)
    new = out_prefix(src, spec.out)
    roof = roofline(spec)
    timer = torch_timer() if spec.use_accelerator else None
    with progress.stage(f"reading {src}") as stage:
        wl = load_workload(src)
        stage.describe("pricing the compute nodes")
        rw = rewrite(wl, roof, timer)
        apply(wl, rw)
        stage.describe(f"writing {new}")
        written = save_workload(wl, new)
    return ComputeCalibration(wl.name, wl.n_ranks, new, list(written), rw, timer is not None)
