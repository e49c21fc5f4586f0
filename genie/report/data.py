"""Figure data for reports: plain dicts of numbers, built from the run store or simulate JSON.

Pure apart from reading the store: nothing here draws. Every figure is a dict
``{"id", "kind", "title", "x": {"label", "unit", "scale"}, "y": {...}, "series": [...]}``
(``series``: ``{"label", "run_id", "role", "x", "y", ...}``), so ``--json`` and the PNGs show
the same numbers. Units: sizes in bytes, times in seconds, bandwidths in bytes/s
(the plots print GB/s = 10^9 bytes/s).

This module gathers a measured run's data from the store: its instances grouped into curves with
their statistics and the cost model per size (``bench_groups``), the run's facts and its label.
The figures are made next to it: ``size_figures`` (bench curves and model error over message
size), ``simulation_figures`` (simulate/emulate documents), ``timelines`` and ``sweeps``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from genie.calibration.runs import program_hosts, run_calibration, run_topology, stored_program
from genie.errors import GenieError
from genie.store import RunInfo, RunStore

MODEL_POINTS_PER_OCTAVE = 2  # analytical curve: sizes between the measured ones, per doubling


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def group_key(inst: dict[str, Any], placement: Sequence[str] = ()) -> tuple[str, str, int, str]:
    """(collective, algorithm, ranks, intra-host or inter-host): points of one curve."""
    return (inst["collective"], inst["algorithm"], int(inst["n_ranks"]), _span(inst, placement))


def _span(inst: dict[str, Any], placement: Sequence[str]) -> str:
    """``intra-host`` when every rank of the instance sat on one host, else ``inter-host``:
    the two are different links, so they are never one curve."""
    spec = inst.get("program") or {}
    ranks = spec.get("ranks") or list(range(int(inst["n_ranks"])))
    try:
        hosts = {placement[int(r)] for r in ranks}
    except (IndexError, ValueError, TypeError):
        return "inter-host"
    return "intra-host" if len(hosts) == 1 and len(ranks) > 1 else "inter-host"


def model_time(spec: dict[str, Any], size: int, topology, placement: Sequence[str]) -> float | None:
    """Cost-model time (s) of the stored program ``spec`` at buffer ``size`` (None if unpriced)."""
    from genie.collectives.cost import estimate

    if topology is None:
        return None
    prog = stored_program(spec, size)
    hosts = program_hosts(prog, placement) if prog is not None else None
    if hosts is None:
        return None
    try:
        return float(estimate(prog, topology, hosts).time_s)
    except GenieError:
        return None


def _model_sizes(sizes: Sequence[int]) -> list[int]:
    """Measured sizes plus log-spaced sizes between them (a smooth analytical curve)."""
    lo, hi = min(sizes), max(sizes)
    out = set(int(s) for s in sizes)
    if hi > lo:
        n = math.ceil(math.log2(hi / lo) * MODEL_POINTS_PER_OCTAVE)
        for v in np.geomspace(lo, hi, n + 1):
            out.add(round(float(v)))
    return sorted(out)


def bench_groups(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """Per (collective, algorithm, ranks) of a run: measured statistics and the model per size.

    A dilated run's times are the wire's divided by its dilation K and its model the lab's / K
    (``genie.calibration.dilation.reported_s``), as ``genie bench``/``emulate`` printed them.
    """
    from genie.calibration.accuracy import error_pct
    from genie.calibration.dilation import reported_s, run_dilation
    from genie.calibration.model import calibrate_topology
    from genie.vocabulary import bus_factor

    run = store.run(run_id)
    insts = store.instances(run.run_id)
    topo, placement = run_topology(run)
    k = run_dilation(run.meta)

    def model(spec: dict[str, Any], size: int, topology) -> float | None:
        t = model_time(spec, size, topology, placement)
        return None if t is None else reported_s(t, k)

    cal = run_calibration(store, run)
    cal_topo = calibrate_topology(topo, cal) if cal and topo is not None else None
    groups: dict[tuple[str, str, int, str], dict[int, list[dict]]] = {}
    for x in insts:
        groups.setdefault(group_key(x, placement), {}).setdefault(int(x["size"]), []).append(x)
    out = []
    for (coll, algo, n, span), by_size in sorted(groups.items()):
        sizes = sorted(by_size)
        rows = []
        for s in sizes:
            times = [reported_s(float(x["time_s"]), k) for x in by_size[s]]
            p50 = _pct(times, 50)
            alg = s / p50 if p50 > 0 else 0.0
            spec = by_size[s][0]["program"]
            modeled = model(spec, s, topo)
            calibrated = model(spec, s, cal_topo)
            rows.append(
                {
                    "size": s,
                    "iterations": len(times),
                    "time_p50_s": p50,
                    "time_p99_s": _pct(times, 99),
                    "time_min_s": min(times),
                    "time_max_s": max(times),
                    "times_s": times,
                    "algbw_Bps": alg,
                    "busbw_Bps": alg * bus_factor(coll, n),
                    "modeled_s": modeled,
                    "calibrated_s": calibrated,
                    "nominal_error_pct": error_pct(modeled, p50),
                    "calibrated_error_pct": error_pct(calibrated, p50),
                }
            )
        spec = by_size[sizes[0]][0]["program"]
        curve = []
        for s in _model_sizes(sizes):
            t = model(spec, s, topo)
            if t is not None and t > 0:
                curve.append({"size": s, "time_s": t, "busbw_Bps": s / t * bus_factor(coll, n)})
        out.append(
            {
                "run_id": run.run_id,
                "run_label": run_label(run),
                "collective": coll,
                "algorithm": algo,
                "n_ranks": n,
                "span": span,
                "rows": rows,
                "model": curve,
                "calibration": cal.label if cal else None,
                "calibration_params": cal.describe() if cal else None,
                "dilation": k,
            }
        )
    return out


def run_facts(run: RunInfo) -> dict[str, Any]:
    """What the HTML says about a run: its row, testbed text, host facts and clock offsets."""
    return {
        "run_id": run.run_id,
        "status": run.status,
        "command": run.command,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "genie_version": run.genie_version,
        "testbed_name": run.testbed_name,
        "testbed": run.testbed,
        "host_facts": run.host_facts,
        "clock_offsets": run.clock_offsets,
        "meta": run.meta,
        "error": run.error,
        "instances": run.instances,
    }


_LABEL_META = ("transport", "dilation", "mode", "calibration", "streams", "iterations")


def run_label(run: RunInfo) -> str:
    """The run named by what it ran on: testbed, transport, dilation (not its id)."""
    meta = run.meta or {}
    parts = [run.testbed_name or "testbed"]
    for k in _LABEL_META[:2]:
        v = meta.get(k)
        if v not in (None, "", 1, 1.0, "tcp"):
            parts.append(f"{k} {v}")
    return ", ".join(parts)
