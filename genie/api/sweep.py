"""``run_sweep``: one simulation over a grid of spec fields, as ``genie sweep``.

A ``SweepSpec`` is a base ``SimulateSpec``, the ``Axis`` it is swept along (a field of the
spec, dotted: ``fabric.bandwidth``, ``model.algorithm``, ``perturb.stragglers``, and its
values) and settings ``fixed`` for every point. The grid is every combination of the axes'
values, in the order the axes are given (the last varies fastest); every point is the base spec
with those fields set (``SweepSpec.points``), checked as a spec before anything runs. The points
run on every core (``genie.sweep.pool``, a process pool) or on an existing Dask distributed
cluster (``dask``). The result holds a row per point (its numbers, or the one-line error it hit)
and, with ``out``, writes ``sweep.json``, ``sweep.csv`` and the figure ``sweep.{png,svg,pdf}``;
its ``to_dict()`` is what ``genie sweep --json`` prints.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import msgspec

from genie import progress
from genie.api.simulation import simulate
from genie.api.specs import SimulateSpec, Spec
from genie.errors import GenieError, MissingDependency, UsageError
from genie.sweep.grid import MAX_POINTS
from genie.sweep.pool import default_workers, run_all

JsonDoc = dict[str, object]
Value = str | int | float | bool | tuple[str, ...] | None
MODEL = "genie simulate, analytical model"
CSV_COLUMNS = (
    "iteration_s",
    "exposed_comm_s",
    "compute_s",
    "wait_s",
    "idle_s",
    "vs_best",
    "busiest_link",
    "error",
)
T = TypeVar("T", bound=msgspec.Struct)


class Axis(Spec, frozen=True, kw_only=True):
    """One field of the spec and the values it takes.

    ``field``: dotted, from the ``SimulateSpec`` (``fabric.bandwidth``, ``model.chunks``).
    ``values``: as the field takes them (``"100gbit"`` or ``12.5e9`` for a bandwidth).
    ``name``: what rows and tables call it (default the field's last part). ``labels``: how
    each value is shown (default the value itself).
    """

    field: str
    values: tuple[Value, ...]
    name: str | None = None
    labels: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The axis' name in rows and tables."""
        return self.name or self.field.rpartition(".")[2]

    def texts(self) -> tuple[str, ...]:
        """How each value is shown."""
        return self.labels or tuple(_text(v) for v in self.values)


class SweepSpec(Spec, frozen=True, kw_only=True):
    """Simulate ``base`` at every point of the grid ``axes`` (with ``fixed`` set everywhere).

    ``workers``: local processes (default every core); ``dask``: the address of a Dask
    scheduler to run the points on instead (the ``sweep`` extra). ``out``: a directory to write
    the table and the figure into (None: write nothing).
    """

    base: SimulateSpec
    axes: tuple[Axis, ...]
    fixed: tuple[Axis, ...] = ()
    workers: int | None = None
    dask: str | None = None
    out: str | None = None

    @property
    def keys(self) -> list[str]:
        """The swept keys, in order."""
        return [a.key for a in self.axes]

    def points(self) -> list[SweepPoint]:
        """Every point of the grid, each with its spec (a bad value: a one-line UsageError)."""
        self._check()
        base = self.base
        for ax in self.fixed:
            base = with_field(base, ax.field, ax.values[0])
        out = []
        for combo in itertools.product(*(range(len(a.values)) for a in self.axes)):
            spec = base
            point: dict[str, str] = {}
            for ax, i in zip(self.axes, combo, strict=True):
                spec = with_field(spec, ax.field, ax.values[i])
                point[ax.key] = ax.texts()[i]
            text = label(point)
            out.append(SweepPoint(point, text, _checked(spec, text)))
        return out

    def _check(self) -> None:
        """The grid's shape: axes with values, distinct names, at most MAX_POINTS points."""
        if not self.axes:
            raise UsageError("a sweep needs at least one axis (a field and its values)")
        names = [a.key for a in (*self.fixed, *self.axes)]
        if len(set(names)) != len(names):
            raise UsageError(f"sweep: a name given twice in {names}")
        for ax in (*self.fixed, *self.axes):
            if not ax.values or (ax.labels and len(ax.labels) != len(ax.values)):
                raise UsageError(f"sweep axis {ax.key}: values, and one label per value")
        for ax in self.fixed:
            if len(ax.values) != 1:
                raise UsageError(f"sweep: fixed {ax.key} takes one value")
        n = 1
        for ax in self.axes:
            n *= len(ax.values)
        if n > MAX_POINTS:
            raise UsageError(f"the grid has {n} points, more than {MAX_POINTS}")


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its values as shown, its label and its spec."""

    point: dict[str, str]
    label: str
    spec: SimulateSpec


@dataclass(frozen=True)
class SweepRow:
    """What one point's simulation gave (the first backend's numbers), or its error."""

    point: dict[str, str]
    label: str
    workload: str | None = None
    network: str | None = None
    backend: str | None = None
    iteration_s: float | None = None
    compute_s: float | None = None
    exposed_comm_s: float | None = None
    wait_s: float | None = None
    idle_s: float | None = None
    busiest_link: str | None = None
    busiest_link_bottleneck_share: float | None = None
    vs_best: float | None = None  # iteration time over the sweep's best
    error: str | None = None  # the one-line error this point hit

    def to_dict(self) -> JsonDoc:
        """The row as ``genie sweep --json`` prints it (seconds)."""
        head: JsonDoc = {"point": dict(self.point), "label": self.label}
        if self.error is not None:
            return {**head, "error": self.error}
        out: JsonDoc = {
            **head,
            "workload": self.workload,
            "network": self.network,
            "backend": self.backend,
            "iteration_s": self.iteration_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "wait_s": self.wait_s,
            "idle_s": self.idle_s,
            "busiest_link": self.busiest_link,
            "busiest_link_bottleneck_share": self.busiest_link_bottleneck_share,
        }
        if self.vs_best is not None:
            out["vs_best"] = self.vs_best
        return out


@dataclass
class SweepResult:
    """A sweep's rows, what ran them, and the files written (``to_dict()``: the --json)."""

    title: str
    keys: list[str]  # the swept names, in order
    fixed: dict[str, str]  # the fixed settings, as shown
    rows: list[SweepRow]  # one per point, in the grid's order
    where: str  # what ran the points: "N processes" or "Dask at ADDRESS"
    model: str = MODEL
    files: list[Path] = field(default_factory=list)  # written by ``write``
    notes: list[str] = field(default_factory=list)  # e.g. why no figure was drawn

    @property
    def failed(self) -> list[SweepRow]:
        """The rows whose simulation failed."""
        return [r for r in self.rows if r.error is not None]

    def to_dict(self) -> JsonDoc:
        """The ``genie sweep --json`` document."""
        return {"title": self.title, "model": self.model, "rows": self._rows()}

    def table_doc(self) -> JsonDoc:
        """The ``sweep.json`` document: the rows with the keys, the fixed settings and units."""
        return {
            "title": self.title,
            "model": self.model,
            "keys": self.keys,
            "fixed": self.fixed,
            "units": {"time": "s"},
            "rows": self._rows(),
        }

    def _rows(self) -> list[JsonDoc]:
        return [r.to_dict() for r in self.rows]

    def write(self, out: str | Path) -> list[Path]:
        """Write ``sweep.json``, ``sweep.csv`` and the figure (without matplotlib: a note)."""
        where = Path(out)
        where.mkdir(parents=True, exist_ok=True)
        rows = self._rows()
        files = [where / "sweep.json", where / "sweep.csv"]
        files[0].write_text(json.dumps(self.table_doc(), indent=1))
        with files[1].open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow([*self.keys, *CSV_COLUMNS])
            for r in self.rows:
                d = r.to_dict()
                w.writerow([*(r.point[k] for k in self.keys), *(d.get(c, "") for c in CSV_COLUMNS)])
        try:
            from genie.report.plots import draw
            from genie.report.sweeps import sweep_figure

            fig = sweep_figure(rows, self.keys, self.title, self.model)
            files += draw(fig, where / "sweep.png", all_formats=True)
            # the plotted numbers with what each axis showed (genie.report.checks reads it)
            files.append(where / "figures.json")
            files[-1].write_text(json.dumps({"units": {"time": "s"}, "figures": [fig]}, indent=1))
        except MissingDependency as exc:
            self.notes.append(f"no figure: {exc}")
        self.files += files
        return files


def run_sweep(spec: SweepSpec) -> SweepResult:
    """Simulate every point of ``spec``'s grid (see the module docstring)."""
    points = spec.points()
    workers = spec.workers or default_workers()
    where = f"Dask at {spec.dask}" if spec.dask else f"{min(workers, len(points))} processes"
    with progress.bar(f"sweep on {where}", len(points), "points") as bar:

        def done(i: int, _row: SweepRow) -> None:
            bar.advance()
            bar.describe(f"{points[i].label} done")

        rows: list[SweepRow] = run_all(
            run_point, points, workers=workers, dask=spec.dask, on_result=done
        )
    best = min((r.iteration_s for r in rows if r.iteration_s is not None), default=None)
    if best:
        rows = [
            replace(r, vs_best=r.iteration_s / best) if r.iteration_s is not None else r
            for r in rows
        ]
    name = next((r.workload for r in rows if r.workload is not None), Path(spec.base.workload).name)
    fixed = {ax.key: ax.texts()[0] for ax in spec.fixed}
    shown = ", ".join(f"{k} {v}" for k, v in fixed.items())
    title = name + (f" ({shown})" if shown else "") + f": sweep of {', '.join(spec.keys)}"
    result = SweepResult(title, spec.keys, fixed, rows, where, model_of(rows))
    if spec.out is not None:
        result.write(spec.out)
    return result


def run_point(point: SweepPoint) -> SweepRow:
    """Simulate one point (in a worker): its numbers, or the one-line error it hit."""
    progress.set_quiet(True)
    try:
        sim = simulate(point.spec)
    except GenieError as exc:
        return SweepRow(point.point, point.label, error=str(exc))
    rep = sim.reports[0]
    link = rep.links[0] if rep.links else None
    return SweepRow(
        point.point,
        point.label,
        workload=sim.workload.name,
        network=sim.network,
        backend=rep.backend,
        iteration_s=rep.iteration_s,
        compute_s=rep.mean("compute"),
        exposed_comm_s=rep.mean("exposed_comm"),
        wait_s=rep.mean("wait"),
        idle_s=rep.mean("idle"),
        busiest_link=link["link"] if link else None,
        busiest_link_bottleneck_share=link["bottleneck_share"] if link else None,
    )


def model_of(rows: Sequence[SweepRow]) -> str:
    """What priced the points: genie simulate with the NCCL-like or the line-rate collective
    model (as each point's network line says), or both where the grid swept it."""
    kinds = []
    for r in rows:
        if r.network is not None:
            k = "NCCL-like" if "NCCL-like" in r.network else "line-rate"
            if k not in kinds:
                kinds.append(k)
    if not kinds:
        return MODEL
    what = " and ".join(kinds)
    return f"genie simulate, {what} collective model{'s' if len(kinds) > 1 else ''}"


def label(point: dict[str, str]) -> str:
    """``topology leaf_spine, bandwidth 100gbit``."""
    return ", ".join(f"{k} {v}" for k, v in point.items())


def with_field(spec: T, path: str, value: object) -> T:
    """A copy of ``spec`` with the dotted field ``path`` set to ``value``."""
    head, _, rest = path.partition(".")
    if head not in type(spec).__struct_fields__:
        raise UsageError(f"{type(spec).__name__} has no field {head!r} (sweep field {path!r})")
    if rest:
        inner = getattr(spec, head)
        if not isinstance(inner, msgspec.Struct):
            raise UsageError(f"sweep field {path!r}: {head} is not a spec")
        value = with_field(inner, rest, value)
    return msgspec.structs.replace(spec, **{head: value})


def _checked(spec: SimulateSpec, where: str) -> SimulateSpec:
    """``spec`` with every field of the type it must have (a wrong one: a UsageError)."""
    try:
        return SimulateSpec.from_dict(spec.to_dict())
    except (UsageError, TypeError) as exc:
        raise UsageError(f"point {where}: {exc}") from None


def _text(value: Value) -> str:
    """A value as a point shows it."""
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
