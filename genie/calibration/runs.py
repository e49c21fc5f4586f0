"""Stored runs as fit points: each measured (program, size) with its median time.

A bench run stores every instance with its program (``ProgramSpec`` JSON), the testbed file's
text and the rank placement, so a run can be priced again at any time: ``run_topology`` rebuilds
the testbed's nominal topology, ``stored_program`` the program, ``run_points`` groups a run's
measured instances (warm-up left out) into one point per program with its median time.
Overlapped emulate runs are refused: their collectives shared the wire with each other.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import msgspec

from genie.calibration.fit import Point
from genie.errors import CalibrationError, GenieError
from genie.store import RunInfo, RunStore
from genie.units import format_bytes


def run_topology(run: RunInfo) -> tuple[Any, list[str]]:
    """The run's nominal topology (from its stored testbed text) and placement, or (None, [])."""
    from genie.testbed.loader import loads_testbed

    placement = list(run.meta.get("placement") or [])
    if not run.testbed.strip():
        return None, placement
    try:
        tb = loads_testbed(run.testbed, source=f"run {run.run_id}")
        topo = tb.to_topology()
    except (GenieError, ValueError, KeyError):
        return None, placement
    if not placement:
        placement = [h.name for h in tb.hosts for _ in range(h.ranks)]
    return topo, placement


def stored_program(spec: dict[str, Any], size: int | None = None) -> Any:
    """The Program of a stored spec (at ``size`` if given), or None if it cannot be rebuilt."""
    from genie.collectives.program import ProgramSpec
    from genie.collectives.registry import program_from_spec

    if not spec:
        return None
    try:
        ps = msgspec.convert(spec if size is None else {**spec, "size": int(size)}, ProgramSpec)
        return program_from_spec(ps)
    except (GenieError, ValueError, msgspec.ValidationError):
        return None


def program_hosts(program: Any, placement: Sequence[str]) -> list[str] | None:
    """The host of each group rank of ``program`` under the run's ``placement`` (None: short)."""
    spec = program.spec
    try:
        return [placement[spec.global_rank(i)] for i in range(spec.n_ranks)]
    except IndexError:
        return None


def run_points(store: RunStore, run_id: str) -> tuple[RunInfo, list[Point]]:
    """One fit point per distinct program a run measured (median over measured iterations)."""
    run = store.run(run_id)
    if run.meta.get("mode") == "overlapped":
        raise CalibrationError(
            f"run {run.run_id} is an overlapped emulate run: its collectives shared the wire; "
            "calibrate from genie bench runs (or emulate --mode isolated)"
        )
    topo, placement = run_topology(run)
    if topo is None:
        raise CalibrationError(f"run {run.run_id} kept no usable testbed file to price it on")
    groups: dict[str, list[dict[str, Any]]] = {}
    for x in store.instances(run.run_id):
        if x["collective"] == "flow":
            continue
        groups.setdefault(msgspec.json.encode(x["program"]).decode(), []).append(x)
    points = []
    for rows in groups.values():
        first = rows[0]
        program = stored_program(first["program"])
        hosts = program_hosts(program, placement) if program is not None else None
        times = [float(x["time_s"]) for x in rows if float(x["time_s"]) > 0]
        if program is None or hosts is None or not times:
            continue
        spec = program.spec
        size = int(first["size"])
        points.append(
            Point(
                program=program,
                hosts=hosts,
                topology=topo,
                measured_s=statistics.median(times),
                series=(run.run_id, spec.collective, spec.algorithm, spec.n_ranks, spec.chunks),
                size=size,
                label=f"{spec.collective}/{spec.algorithm} n={spec.n_ranks} {format_bytes(size)}",
            )
        )
    if not points:
        raise CalibrationError(f"run {run.run_id} has no measured collectives to calibrate with")
    return run, sorted(points, key=lambda p: (p.series, p.size))


def run_calibration(store: RunStore, run: RunInfo) -> Any:
    """The calibration a run was priced with (its meta), else the newest offered one of its
    testbed (``Calibration.offered``), else None (a ``genie.calibration.model.Calibration``)."""
    from genie.calibration.model import Calibration
    from genie.errors import StoreError

    cal_id = run.meta.get("calibration")
    try:
        doc = store.calibration(cal_id) if cal_id else None
    except StoreError:
        doc = None
    if doc is None:
        docs = [d for d in store.calibrations(run.testbed_name) if d.get("offered")]
        doc = docs[0] if docs else None
    return msgspec.convert(doc, Calibration) if doc else None


def bucket_note(run: RunInfo, points: Sequence[Point]) -> str | None:
    """On a netns testbed, a note when messages fit the links' token bucket (tbf burst): the
    wire passes those faster than its rate, which the model (no bucket) cannot follow."""
    from genie.collectives.program import Op
    from genie.testbed.loader import loads_testbed
    from genie.testbed.netns_plan import tbf_params

    try:
        tb = loads_testbed(run.testbed, source=f"run {run.run_id}")
    except GenieError:
        return None
    if tb.kind != "netns" or not tb.links:
        return None
    burst = min(tbf_params(lk.rate, lk.mtu, lk.queue_limit)[1] for lk in tb.links)
    small = [
        p
        for p in points
        if p.series[0] == run.run_id
        and max((s.nbytes for s in p.program.steps(0) if s.op == Op.SEND), default=0) <= burst
    ]
    if not small:
        return None
    return (
        f"run {run.run_id}: {len(small)} point(s) send messages within the links' token bucket "
        f"({format_bytes(burst)}, tbf burst): the wire passes them faster than its rate, which "
        "the model has no term for; calibrate netns testbeds with larger sizes"
    )
