"""Several jobs on the wire: what each job measured alone and together, beside the model.

The jobs are merged into one workload (``genie.sim.jobs.merge_jobs``: the same job model as
``genie simulate A B``), compiled into op lists and run on the agents with ONE Go: every job's
ranks start at one instant, a late job's offset being the compute gap before its first
collective, so the jobs' flows really share the links they cross. Then each job runs alone on
its own hosts (same placement, nothing else on the wire). ``wire_doc`` gives per job the
iteration measured on the wire alone and together (measured instance times replayed, and the
span from the job's start to its last operation's end on the wire), the slowdown, and beside
them the analytical model's alone/together and the links it says the jobs contended on
(``genie.sim.job_report``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from genie.live.overlapped import Overlapped
from genie.sim.job_report import jobs_doc
from genie.sim.jobs import JobMap, job_times

JsonDoc = dict[str, Any]  # a JSON document (seconds, bytes)

MEASURED = "each instance's median time over the runs on the agents, replayed"


def job_span(rows: Sequence[dict], iids: Sequence[int], start_s: float) -> float:
    """Median over the measured runs of the time from a job's start to its last op's end on the
    wire (``rows``: ``Overlapped.rows``, whose intervals are seconds from the common start)."""
    mine = [r for r in rows if r["iid"] in set(iids)]
    if not mine:
        return 0.0
    n = min(len(r["intervals_s"]) for r in mine)
    ends = [max(r["intervals_s"][m][2] for r in mine) for m in range(n)]
    return float(np.median(ends)) - start_s if ends else 0.0


def wire_doc(
    jm: JobMap, together: Overlapped, alone: Sequence[Overlapped], prefixes: Sequence[str]
) -> JsonDoc:
    """The ``--json`` document: the model's jobs document with the wire's figures per job."""
    model = jobs_doc(
        jm,
        together.raws[1],
        together.reports[1],
        together.backends[1],
        together.backends[1].pricer,
        [(j.name, a.backends[1], a.reports[1]) for j, a in zip(jm.jobs, alone, strict=True)],
        prefixes,
        together.compiled,
    )
    measured = job_times(jm, together.raws[0])
    for k, (row, job) in enumerate(zip(model["jobs"], jm.jobs, strict=True)):
        a, t = alone[k].reports[0].iteration_s, measured[k].iteration_s
        spans = [r["makespan_s"] for r in alone[k].runs if not r["warmup"]]
        span_a = float(np.median(spans)) if spans else 0.0
        span_t = job_span(together.rows, job.instances, job.start_s)
        row.update(
            {
                "model_alone_s": row.pop("alone_s"),
                "model_together_s": row.pop("together_s"),
                "model_slowdown": row.pop("slowdown"),
                "measured_alone_s": a,
                "measured_together_s": t,
                "measured_slowdown": t / a if a > 0 else float("nan"),
                "wire_span_alone_s": span_a,
                "wire_span_together_s": span_t,
                "wire_span_slowdown": span_t / span_a if span_a > 0 else float("nan"),
                "run_alone": alone[k].run_id,
            }
        )
    return {
        "mode": "overlapped, several jobs",
        "testbed": together.testbed,
        "run_together": together.run_id,
        "measured": MEASURED,
        "network": together.network,
        **model,
        "wire": together.wire,
    }


@dataclass
class JobsOnWire:
    """Several jobs run together and each alone on the wire (``doc()``: the ``--json``)."""

    together: Overlapped
    alone: list[Overlapped]
    document: JsonDoc

    def to_dict(self) -> JsonDoc:
        """The JSON document (as ``doc()``), named as every genie result names it."""
        return self.doc()

    def doc(self) -> JsonDoc:
        """The JSON document of ``genie emulate A B ... --json``."""
        return self.document
