"""One emulate run on the live agents as the run store keeps it, and its replays.

``live_run`` is one stored run (``StoredRun``: started in the store, controller connected, clocks
synced, host facts and offsets recorded; finished as ok, interrupted or failed) with a progress
bar; ``replay_all`` replays the workload over the measured backend and the models beside it;
``wire_notes`` says how the agents put the job on the wire beyond the trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from genie import progress
from genie.controller.session import Timeouts
from genie.controller.stored_run import StoredRun
from genie.sim.api import replay
from genie.sim.attribution import busiest_links
from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult
from genie.sim.network import NetworkBackend
from genie.sim.perturb import Perturbation
from genie.sim.report import SimReport, chrome_trace
from genie.sim.stragglers import replay_perturbed
from genie.testbed.model import Testbed

Stragglers = tuple[CompiledWorkload, Perturbation, Callable[[], NetworkBackend]]


def workload_hash(cw: CompiledWorkload) -> str:
    """A short hash of the compiled workload's ranks (what the store groups runs by)."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for r in cw.ranks:
        h.update(r.signature())
    return h.hexdigest()


@contextlib.contextmanager
def live_run(
    cw: CompiledWorkload,
    tb: Testbed,
    testbed_path: str | Path,
    agents: Sequence[str],
    *,
    store: str | Path | None,
    meta: dict[str, object],
    command: str,
    unit: str,
    total: int,
    timeouts: Timeouts | None = None,
) -> Iterator[tuple[StoredRun, progress.Bar]]:
    """One stored emulate run on the agents: yields (run, progress bar).

    ``StoredRun`` starts the run in the store, connects the controller, syncs clocks and records
    host facts and offsets; on leaving, the run is finished as ok, interrupted or failed.
    ``timeouts``: the controller's (``Timeouts``; None: the defaults).
    """
    meta = {"workload": cw.name, "placement": list(agents), **meta}
    with (
        StoredRun(
            tb,
            testbed_path,
            command,
            store=store,
            meta=meta,
            workload_hash=workload_hash(cw),
            timeouts=timeouts,
        ) as run,
        progress.bar(f"{cw.name} on {tb.name}", total, unit) as bar,
    ):
        yield run, bar


def wire_notes(tb: Testbed, agents: Sequence[str], sets: int = 1) -> list[str]:
    """How the agents put this job on the wire, beyond the trace: intra-host steps and flows
    (``sets``: connection sets per rank pair, one per process group; ``OpListPlan.channels``)."""
    from genie.live.plan import describe_connections

    notes = [describe_connections(tb.routing.flows, sets)]
    if len(set(agents)) < len(agents):
        bw, lat = tb.intra_host.bandwidth, tb.intra_host.latency
        notes.append(
            "steps between ranks of one host are not sent: the agent exchanges them in memory "
            f"and waits the intra-host model's time ({lat * 1e6:.3g} us + bytes / "
            f"{bw / 1e9:.4g} GB/s on each sending rank's port; times under the host's own copy "
            "and wake-up cost, tens of us, come out late)"
        )
    return notes


def replay_all(
    cw: CompiledWorkload,
    backends: Sequence[NetworkBackend],
    symmetry: bool,
    trace: str | None,
    stragglers: Stragglers | None = None,
) -> tuple[list[SimReport], list[RawResult]]:
    """Replay the workload over each backend; the first one's timeline to ``trace``; return
    the reports and the raw results (one each per backend).

    ``stragglers``: (the unperturbed workload, the perturbation, a factory of the first
    backend): the first replay then says what the stragglers cost and who waited on whom.
    """
    reports: list[SimReport] = []
    raws: list[RawResult] = []
    with progress.stage(f"replaying {cw.n_nodes} nodes") as st:
        for k, be in enumerate(backends):
            st.describe(f"replaying {cw.n_nodes} nodes over {be.name}")
            if k == 0 and stragglers is not None and stragglers[1]:
                base, pert, fresh = stragglers
                rep, raw = replay_perturbed(cw, base, be, fresh, pert, symmetry)
                rep.notes.append(f"stragglers/jitter: {pert.describe()}")
            else:
                rep, raw = replay(cw, be, symmetry=symmetry)
                rep.links = busiest_links(be, rep.iteration_s)
            reports.append(rep)
            raws.append(raw)
    if trace:
        chrome_trace(cw, raws[0], trace)
    return reports, raws
