"""Isolated emulation: each distinct collective of a workload measured alone on the agents.

``run_isolated`` groups the instances by (collective, size, group), runs each alone (warm-up
plus iterations; ``genie.live.run.measure_all``), stores every run, prices each beside the
nominal (and calibrated) model, and replays the workload with each instance taking the median
of its group (``TestbedBackend``); ``Isolated.doc()`` is the ``genie emulate --json`` document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genie.calibration.accuracy import ErrorRow
from genie.calibration.model import Calibration, conditions_refusal
from genie.collectives.program import Program
from genie.controller.results import Instance
from genie.live.backends import Measured, TestbedBackend
from genie.live.compare import Models, iteration_row
from genie.live.compare import models as compare_models
from genie.live.plan import Key, distinct_transfers, plan_key
from genie.live.run import measure_all
from genie.live.stored import Stragglers, live_run, replay_all, wire_notes
from genie.sim.closed import with_closed
from genie.sim.compiled import CompiledWorkload
from genie.sim.network import NetworkBackend
from genie.sim.perturb import Perturbation
from genie.sim.report import SimReport
from genie.sim.streams import order_collectives
from genie.testbed.model import Testbed
from genie.wire.messages import DataOptions, RdmaOptions

JsonDoc = dict[str, Any]  # a JSON document (seconds, bytes)


@dataclass
class Isolated:
    """What ``run_isolated`` measured and replayed (``doc()`` is the ``--json`` document)."""

    run_id: str | None
    workload: str
    testbed: str
    rows: list[JsonDoc]  # per distinct collective: measured and modelled (seconds)
    reports: list[SimReport]  # measured, analytical nominal, [calibrated]
    models: Models
    wire: list[str]
    network: str  # what the analytical backend priced
    error_rows: list[ErrorRow]  # per distinct collective: measured vs nominal vs calibrated
    notes: list[str] = field(default_factory=list)
    compiled: CompiledWorkload | None = None  # the workload replayed (issue order applied)

    def errors(self) -> list[ErrorRow]:
        """Per distinct collective: measured vs nominal vs calibrated."""
        return self.error_rows

    def iteration(self) -> ErrorRow:
        """The iteration replayed with measured times vs with each model."""
        return iteration_row(self.reports, "iteration (replayed)")

    def to_dict(self) -> JsonDoc:
        """The JSON document (as ``doc()``), named as every genie result names it."""
        return self.doc()

    def doc(self) -> JsonDoc:
        """The JSON document of ``genie emulate --mode isolated --json``."""
        cal = self.models.calibration
        return {
            "run_id": self.run_id,
            "mode": "isolated",
            "workload": self.workload,
            "testbed": self.testbed,
            "calibration": cal.cal_id if cal else None,
            "dilation": self.models.k,
            "wire": self.wire,
            "collectives": self.rows,
            "model_error": [e.to_dict() for e in [*self.errors(), self.iteration()]],
            "notes": self.notes,
            "reports": [with_closed(r.to_dict(), None) for r in self.reports],
        }


def run_isolated(
    cw: CompiledWorkload,
    tb: Testbed,
    testbed_path: str | Path,
    agents: Sequence[str],
    *,
    store: str | Path | None,
    iterations: int,
    warmup: int,
    algorithms: dict[str, str],
    chunks: int,
    calibration: Calibration | None,
    asked: str,
    dilation: float,
    comm_concurrency: int,
    command: str,
    symmetry: bool = True,
    trace: str | None = None,
    unperturbed: CompiledWorkload | None = None,
    perturbation: Perturbation | None = None,
) -> Isolated:
    """Each distinct collective of ``cw`` alone on the agents, then the replays (see above)."""
    keys = distinct_transfers(cw)
    cw = order_collectives(cw, comm_concurrency)  # the replays run the issue order
    base = order_collectives(unperturbed, comm_concurrency) if unperturbed is not None else None
    k = dilation
    models = compare_models(tb.to_topology(), calibration, k, tb.model_note(), asked)
    ends = tb.rank_endpoints(agents)  # each rank's NIC: where the model places it
    meta: JsonDoc = {
        "iterations": iterations,
        "mode": "isolated",
        "calibration": calibration.cal_id if calibration else None,
        "dilation": k,
        "streams": tb.routing.flows,
    }
    with live_run(
        cw,
        tb,
        testbed_path,
        agents,
        store=store,
        meta=meta,
        command=command,
        unit="collectives",
        total=len(keys),
    ) as (run, bar):

        def on_done(m: Measured, program: Program, instances: list[Instance]) -> None:
            run.add_instances(program.spec, instances)
            bar.advance()
            bar.describe(f"{m.collective} {m.key[1]} B done")

        assert run.ctl is not None  # StoredRun connected it on entering
        table = measure_all(
            run.ctl,
            keys,
            agents,
            iters=iterations,
            warmup=warmup,
            algorithms=algorithms,
            chunks=chunks,
            on_done=on_done,
            model_placement=ends,
            options=DataOptions(
                streams=tb.routing.flows,
                congestion=tb.tcp.congestion_control,
                # the testbed's data plane, as genie bench takes it (RDMA: each host's device)
                transport=tb.transport,
                rdma=RdmaOptions(
                    devices={h.name: h.rdma_device for h in tb.hosts if h.rdma_device}
                ),
            ),
        )
        refused = conditions_refusal(calibration, dict(run.ctl.conditions))
        if refused:  # fitted under other wire conditions: the nominal model only, and why
            models = compare_models(tb.to_topology(), None, k, tb.model_note(), asked)
            models.missing = refused
            run.update_meta(calibration=None, calibration_refused=refused)
    run_id = run.run_id
    calibrated: dict[Key, float | None] = {}
    for key, m in table.items():
        m.times = [t / k for t in m.times]  # dilated: the wire's times / k
        m.modeled_s, calibrated[key] = models.price(
            plan_key(key, algorithms, chunks), [ends[r] for r in key[2]]
        )
    model_backends = models.backends(ends, cw.n_ranks, algorithms, chunks, cw.instances.splits)

    def measured_backend() -> NetworkBackend:
        return TestbedBackend(table, name=f"testbed:{run_id}", pricer=model_backends[0].pricer)

    backends = [measured_backend(), *model_backends]
    strag: Stragglers | None = None
    if base is not None and perturbation is not None:
        strag = (base, perturbation, measured_backend)
    reports, _ = replay_all(cw, backends, symmetry, trace, strag)
    notes = [n for n in [models.dilation_note(cw, ends, algorithms, chunks, True)] if n]
    rows: list[JsonDoc] = [
        {
            "collective": m.collective,
            "algorithm": m.algorithm,
            "ranks": list(m.key[2]),
            "size": m.key[1],
            "count": m.count,
            "measured_p50_s": m.p50,
            "measured_s": m.times,
            "modeled_s": m.modeled_s,
            "calibrated_s": calibrated[key],
        }
        for key, m in table.items()
    ]
    errors = [
        ErrorRow(f"{m.collective} n={len(m.key[2])}", m.key[1], m.p50, m.modeled_s, calibrated[key])
        for key, m in table.items()
    ]
    return Isolated(
        run_id,
        cw.name,
        tb.name,
        rows,
        reports,
        models,
        wire_notes(tb, agents),
        model_backends[0].pricer.describe(),
        errors,
        notes,
        cw,
    )
