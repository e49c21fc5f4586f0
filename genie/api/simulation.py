"""``simulate``: replay a workload (or several jobs) over network models, as ``genie simulate``.

Networks: ``analytical`` (fluid link sharing on a testbed's topology or a target topology) and
``measured:RUN`` (per-collective times of a ``genie bench`` run, or a JSON file of rows), side by
side when several are given; or ASTRA-sim 2.0's analytical backends (``Model.kind``). The result
is a ``Simulation``: one ``SimReport`` per backend (iteration time, per-rank breakdown,
per-collective rows, busiest links; each labelled with the backend that priced it) and the JSON
document ``genie simulate --json`` prints (``to_dict``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from genie import progress
from genie.api import fabric
from genie.api.experiments import perturbation
from genie.api.specs import Compute, Model, SimulateSpec, bandwidth, ratio
from genie.api.trace_semantics import semantics_facts, semantics_notes
from genie.collectives.registry import parse_algorithms
from genie.errors import StoreError, UsageError
from genie.sim import perturb
from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.api import makespan
from genie.sim.closed import ClosedForm, closed_for
from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult
from genie.sim.nccl_pricer import NcclPricer
from genie.sim.network import AnalyticalBackend, NetworkBackend
from genie.sim.program_pricer import ProgramPricer
from genie.sim.report import CollectiveRow, SimReport, chrome_trace
from genie.sim.stragglers import replay_perturbed
from genie.sim.streams import describe as stream_rule
from genie.sim.streams import order_collectives
from genie.workload.et_codec import gc_paused
from genie.workload.model import Workload
from genie.workload.summary import reading_notes

if TYPE_CHECKING:  # loaded only where asked for: ASTRA-sim's model and files (genie.api.astra)
    from genie.sim.astra_config import AstraNetwork, AstraSystem  # and the measured backend
    from genie.sim.astra_model import AstraBackend
    from genie.sim.measured import MeasuredBackend, MeasuredTable
    from genie.workload.et_columns import NodeColumns
    from genie.workload.model import NodeType

JsonDoc = dict[str, object]


@dataclass
class Simulation:
    """What one simulation computed: a report per backend, and what explains them."""

    workload: CompiledWorkload  # the compiled (perturbed, ordered) workload replayed
    network: str  # what the analytical model priced, in one line
    reports: list[SimReport]  # one per backend, in the order asked
    closed: ClosedForm | None  # the textbook closed form's network, where comparable
    facts: JsonDoc  # how the trace was read (``trace_facts``)
    raws: list[RawResult] = field(default_factory=list)  # the replays' raw timelines
    jobs: JsonDoc | None = None  # several jobs: ``genie.api.jobs.jobs_doc``
    # --collective-model nccl: per distinct collective, the algorithm and protocol chosen
    nccl_choices: list[JsonDoc] | None = None
    # --collective-model nccl: the same replay on the line-rate model, one option away
    line_rate: JsonDoc | None = None
    # what was simulated, as named facts (``configuration``): reports label by what differs
    configuration: JsonDoc | None = None

    @property
    def iteration_s(self) -> float:
        """The first backend's iteration time in seconds."""
        return self.reports[0].iteration_s

    def to_dict(self) -> JsonDoc:
        """The document ``genie simulate --json`` prints (seconds, bytes, GB/s = 10^9 B/s)."""
        # a dict per collective instance (the cyclic collector would walk them meanwhile:
        # they make no cycles)
        with gc_paused():
            reports = [
                # as with_closed(r.to_dict(), closed), each row's dict made once
                r.to_dict(("closed_form_s", closed_forms(r.collectives, self.closed)))
                for r in self.reports
            ]
        out: JsonDoc = {
            "workload": self.workload.name,
            "network": self.network,
            "trace": self.facts,
            "reports": reports,
        }
        if self.jobs is not None:
            out["jobs"] = self.jobs
        if self.nccl_choices is not None:
            out["nccl_choices"] = self.nccl_choices
        if self.line_rate is not None:
            out["line_rate"] = self.line_rate
        if self.configuration is not None:
            out["configuration"] = self.configuration
        return out

    def write_trace(self, path: str | Path, max_ranks: int = 256) -> int:
        """Write the first backend's timeline as Chrome-trace JSON; the number of events."""
        return chrome_trace(self.workload, self.raws[0], str(path), max_ranks=max_ranks)


def closed_forms(rows: list[CollectiveRow], closed: ClosedForm | None) -> list[float | None]:
    """Each report row's ``closed_form_s``, the value ``genie.sim.closed.with_closed`` sets:
    rows alike in what ``closed_for`` reads (collective, ranks, size, and whether uneven, with
    the types of ranks and size) are priced once; no closed form's network: None each."""
    if closed is None:  # closed_for's answer for every row
        return [None] * len(rows)
    # even rows of int ranks and size (most): by collective, ranks and size, no key tuple made
    even: dict[str, dict[int, dict[int, float | None]]] = {}
    memo: dict[tuple[object, ...], float | None] = {}  # the others, keyed as with_closed does
    out: list[float | None] = []
    append = out.append
    for row in rows:
        coll, n, size, uneven = row.collective, row.ranks, row.size, row.uneven
        if uneven is None and type(n) is int and type(size) is int:
            try:
                append(even[coll][n][size])
            except KeyError:
                by_size = even.setdefault(coll, {}).setdefault(n, {})
                append(by_size.setdefault(size, _closed_form(coll, n, size, None, closed)))
            continue
        key = (coll, n, size, type(n), type(size), uneven is None)
        if key not in memo:
            memo[key] = _closed_form(coll, n, size, uneven, closed)
        append(memo[key])
    return out


def _closed_form(
    coll: str, n: object, size: object, uneven: float | None, closed: ClosedForm
) -> float | None:
    """``closed_for`` of a row with these values."""
    return closed_for({"collective": coll, "ranks": n, "size": size, "uneven": uneven}, closed)


def trace_facts(wl: Workload, cw: CompiledWorkload) -> JsonDoc:
    """How the trace was read: dependencies dropped (by reason), host work, lanes used (the
    host work as the compile counted it, where it did: ``CompiledWorkload.host_work_nodes``)."""
    from itertools import compress
    from operator import attrgetter, itemgetter

    from genie.workload.model import DERIVED_INDEX, NodeKind, NodeType

    # host work (NodeKind.HOST) is a communication node marked is_cpu_op (``Node.kind``,
    # ``is_host_work``): only those nodes, picked at C speed, are asked their kind
    comm = {NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE}
    is_comm, get_d = comm.__contains__, attrgetter("_d")
    cpu_op = itemgetter(DERIVED_INDEX["is_cpu_op"])
    ranks = list(wl.ranks)
    if cw.host_work_nodes is not None:  # counted by the compile (a kind per distinct node)
        host = cw.host_work_nodes
    elif ranks and all(hasattr(c, "derived_table") for c in ranks):
        host = _host_work_of_columns(cast("list[NodeColumns]", ranks), comm)
    else:
        try:
            host = 0
            for rg in ranks:  # is_cpu_op first (C speed): in GPU traces few nodes have it
                for n in compress(rg.nodes, map(cpu_op, map(get_d, rg.nodes))):
                    if is_comm(n.type):
                        host += n.kind is NodeKind.HOST
        except AttributeError:  # nodes of another make: each asked
            host = sum(n.kind is NodeKind.HOST for rg in ranks for n in rg.nodes)
    return {
        "dropped": dict(wl.dropped),
        "host_work_nodes": host,
        "lanes": sorted({name for cr in cw.ranks for name in cr.lane_names}),
    }


_BLOCK = 1024  # ranks whose columns ``_host_work_of_columns`` counts together


def _host_work_of_columns(ranks: list[NodeColumns], comm: set[NodeType]) -> int:
    """``trace_facts``'s host work nodes of a workload of columns (``genie.workload.columnar``).

    Each distinct (type, derived tuple) pair of the communication rows is asked its kind once
    (of a Node holding just those), counted over every rank that shares a derived table in one
    pass; a rank with rows decoded as Nodes (``fallback``: their columns are not filled) asks
    those Nodes and counts its other rows alone.
    """
    from genie.workload.model import Node, NodeKind

    codes = np.array(sorted(int(t) for t in comm), np.int64)
    host = 0
    # ranks of one derived table (ranks read together share it): their columns, pooled
    pools: dict[int, list[NodeColumns]] = {}
    mixed: list[NodeColumns] = []
    for cols in ranks:
        (mixed if cols.fallback else pools.setdefault(id(cols.derived_table), [])).append(cols)
    # (derived table, type column, derived column), a block of ranks at a time (memory)
    alone = [
        (
            p[0].derived_table,
            np.concatenate([c.type for c in p[k : k + _BLOCK]]),
            np.concatenate([c.derived for c in p[k : k + _BLOCK]]),
        )
        for p in pools.values()
        for k in range(0, len(p), _BLOCK)
    ]
    for cols in mixed:
        fb = cols.fallback
        rows = cols.rows_of_type(*comm)
        host += sum(fb[r].kind is NodeKind.HOST for r in rows.tolist() if r in fb)
        mine = rows[~np.isin(rows, list(fb))]
        alone.append((cols.derived_table, cols.type[mine], cols.derived[mine]))
    kinds: dict[tuple[int, int], bool] = {}  # (type, id of its derived tuple) -> host work?
    for table, type_col, derived_col in alone:
        picked = np.isin(type_col, codes)
        if not picked.any():
            continue
        span = len(table) + 1
        keys = type_col[picked].astype(np.int64) * span + derived_col[picked]
        counts = np.bincount(keys)
        seen = np.flatnonzero(counts)
        for key, count in zip(seen.tolist(), counts[seen].tolist(), strict=True):
            t, d = divmod(key, span)
            is_host = kinds.get((t, id(table[d])))
            if is_host is None:
                probe = Node.__new__(Node)
                probe.type, probe._d = t, table[d]
                is_host = kinds[(t, id(table[d]))] = probe.kind is NodeKind.HOST
            host += count if is_host else 0
    return host


def trace_notes(facts: JsonDoc) -> list[str]:
    """Report notes for what ``trace_facts`` found, when there is something to say."""
    dropped, host, lanes = facts["dropped"], facts["host_work_nodes"], facts["lanes"]
    assert isinstance(dropped, dict) and isinstance(host, int) and isinstance(lanes, list)
    notes = reading_notes(dropped, host)
    if lanes not in ([], ["gpu"]):
        notes.append(f"lanes (each runs one node at a time; genie.sim.lanes): {', '.join(lanes)}")
    return notes


def describe(pricer: fabric.Pricer | AstraBackend) -> str:
    """A pricer's one-line description of the network it prices."""
    return pricer.describe()


def compute_model(spec: Compute, system: AstraSystem | None = None) -> ComputeModel:
    """The simulator's compute model of ``spec`` (ASTRA-sim's roofline where its files say)."""
    if spec.mode == "roofline" and not (spec.peak_flops or spec.memory_bandwidth):
        raise UsageError("--compute roofline needs --peak-flops and/or --memory-bandwidth")
    mem = bandwidth(spec.memory_bandwidth) if spec.memory_bandwidth is not None else None
    compute = ComputeModel(
        mode=spec.mode,
        peak_flops=spec.peak_flops,
        efficiency=spec.efficiency,
        memory_bandwidth=mem,
    )
    if system is not None and system.roofline:
        compute = system.compute_model()  # ASTRA-sim's roofline-enabled
    return compute


def measured_table(source: str, store: str | None, algorithm: str | None) -> MeasuredTable:
    """The measured times of a ``genie bench`` run in the store, or of a JSON file of rows."""
    from genie.sim.measured import MeasuredTable

    if source.endswith(".json") or Path(source).is_file():
        return MeasuredTable.from_json(source)
    from genie.store import DEFAULT_STORE, RunStore

    path = Path(store or DEFAULT_STORE)
    if not path.is_file():
        raise StoreError(f"no run store at {path} (run `genie bench` first, or pass --store)")
    with RunStore(path) as st:
        info = st.run(source)
        rows = st.instances(info.run_id)
    return MeasuredTable.from_instances(rows, f"run {info.run_id}", parse_algorithms(algorithm))


def backend_names(spec: SimulateSpec) -> list[str]:
    """The backends ``spec.network`` names (checked)."""
    out = []
    for name in [s.strip() for s in spec.network if s.strip()]:
        if name in ("testbed", "emulate"):
            raise UsageError(
                "the testbed backend runs through `genie emulate WORKLOAD --testbed F`"
            )
        if name != "analytical" and not name.startswith("measured:"):
            raise UsageError(f"unknown network backend {name!r} (analytical, measured:RUN_ID)")
        out.append(name)
    if not out:
        raise UsageError("--network names no backend")
    return out


_TABLES: dict[tuple[str, str | None, str | None], MeasuredTable] = {}


def _backend(spec: SimulateSpec, pricer: fabric.Pricer, name: str) -> NetworkBackend:
    """A fresh backend ``name`` over ``pricer`` (measured tables read once per process)."""
    if name == "analytical":
        return AnalyticalBackend(pricer, track_links=True)
    from genie.sim.measured import MeasuredBackend

    key = (name, spec.store, spec.model.algorithm)
    if key not in _TABLES:
        _TABLES[key] = measured_table(name.split(":", 1)[1], spec.store, spec.model.algorithm)
    alone = AnalyticalBackend(pricer)
    share = pricer if spec.sharing else None
    return MeasuredBackend(_TABLES[key], model=alone.alone, name=name, pricer=share)


def _maker(spec: SimulateSpec, pricer: fabric.Pricer, name: str) -> Callable[[], NetworkBackend]:
    """Makes fresh backends ``name`` over ``pricer`` (a straggler replay needs a second one)."""
    return lambda: _backend(spec, pricer, name)


def simulate(spec: SimulateSpec) -> Simulation:
    """Replay what ``spec`` describes over each network it names (see the module docstring)."""
    spec = spec.replace(fabric=fabric.with_gpu(spec.fabric, spec.model))
    net: AstraNetwork | None = None
    system: AstraSystem | None = None
    if _asks_for_astra(spec.model):  # else genie's model on its own options: nothing to load
        from genie.api import astra

        net, system = astra.load_configs(spec)
    astra_notes: list[str] = []
    if net is not None and system is not None and spec.model.kind == "genie":
        spec, astra_notes = astra.as_genie_model(spec, net, system)
    spec = spec.replace(model=fabric.resolve_collective_model(spec.model))
    compute = compute_model(spec.compute, system)
    pert = perturbation(spec.perturb)
    if spec.jobs:
        if spec.model.kind != "genie":
            raise UsageError("several jobs run on genie's model (--model genie)")
        from genie.api.jobs import simulate_jobs

        with gc_paused():
            return simulate_jobs(spec, compute, pert)
    # the cyclic collector would walk the workload's millions of objects again and again while
    # nothing here makes garbage cycles (a quarter of the time at 4,096 ranks): paused
    with gc_paused(), progress.stage("loading workload") as status:
        # columns (no Python object per node) where the trace is big and genie's own model runs
        # it: the ASTRA-sim models and comm-group files read Node objects
        auto = spec.model.kind == "genie" and not spec.model.comm_group
        wl = load_workload(spec.workloads()[0], columns=None if auto else False)
        if spec.model.comm_group:
            from genie.api import astra

            astra.apply_comm_groups(spec.model, wl)
        status.describe(f"compiling {wl.n_ranks} ranks")
        base = compile_workload(wl, compute, spec.model.trace_edges)
        genie_model = spec.model.kind == "genie"
        if genie_model:
            base = order_collectives(base, spec.model.comm_concurrency)
        cw = perturb.apply(base, pert)
        closed: ClosedForm | None = None
        placement_notes: tuple[str, ...] = ()
        makers: list[tuple[str, Callable[[], NetworkBackend]]]  # (backend name, maker)
        pricer: fabric.Pricer | AstraBackend
        if genie_model:
            priced, closed, placement_notes = fabric.network_model(
                spec.fabric, spec.model, cw.n_ranks, store=spec.store
            )
            priced.use_splits(cw.instances.splits)  # all-to-all-v priced by its matrix
            pricer = priced
            makers = [(name, _maker(spec, priced, name)) for name in backend_names(spec)]
        else:
            assert net is not None and system is not None
            first = astra.astra_backend(spec, wl, cw, net, system)
            pricer, built = first, [first]

            def again() -> NetworkBackend:
                assert net is not None and system is not None
                return built.pop() if built else astra.astra_backend(spec, wl, base, net, system)

            makers = [(spec.model.kind, again)]
        facts = trace_facts(wl, cw)
        facts.update(semantics_facts(wl, cw, spec.model.trace_edges))
        if genie_model:  # the replays need only the compiled form: the workload's node objects
            del wl  # (most of the memory at 16,384 ranks) go before the replays' arrays come
        reports: list[SimReport] = []
        raws: list[RawResult] = []
        for name, make in makers:
            status.describe(f"replaying {cw.n_nodes} nodes")
            be = make()
            rep, raw = replay_perturbed(cw, base, be, make, pert, spec.symmetry)
            if name.startswith("measured:"):  # a MeasuredBackend (``_backend``)
                rep.notes.append(cast("MeasuredBackend", be).summary())
            elif not genie_model:  # ASTRA-sim's backend (``again``)
                rep.notes.append(cast("AstraBackend", be).summary())
            rep.notes.extend(astra_notes)
            rep.notes.extend(placement_notes)
            rep.notes += trace_notes(facts) + semantics_notes(facts)
            if genie_model:
                rep.notes.append(f"stream order: {stream_rule(spec.model.comm_concurrency)}")
            if pert:
                rep.notes.append(f"stragglers/jitter: {pert.describe()}")
            fallbacks = pricer.fallbacks if isinstance(pricer, ProgramPricer) else None
            if fallbacks:
                rep.notes.append(
                    "priced by the built-in traffic model (no program or the cost model "
                    f"declined): {dict(sorted(fallbacks.items()))}"
                )
            reports.append(rep)
            raws.append(raw)
    sim = Simulation(cw, describe(pricer), reports, closed, facts, raws)
    sim.configuration = configuration(spec, pricer)
    if isinstance(pricer, NcclPricer):
        sim.nccl_choices = pricer.choices_doc()
        sim.line_rate = _line_rate(spec, cw, pricer)
    return sim


def _asks_for_astra(model: Model) -> bool:
    """Whether ``model`` names ASTRA-sim's model or files (``genie.api.astra`` reads them)."""
    return model.kind != "genie" or bool(model.astra_network or model.astra_system)


def configuration(spec: SimulateSpec, pricer: fabric.Pricer | AstraBackend) -> JsonDoc:
    """What one simulation ran, as named facts (bytes/s, ratios): the fabric (topology, the
    hosts' link rate, oversubscription, routing) and the collective model; a report labels
    several simulations by the facts that differ between them (``genie.report.labels``)."""
    f, m = spec.fabric, spec.model
    model: str
    if m.kind != "genie":
        model = m.kind
    elif isinstance(pricer, NcclPricer):
        model = "NCCL-like" + (f" ({m.gpu})" if m.gpu else "")
    else:
        model = "line-rate"
    return {
        "testbed": Path(f.testbed).stem if f.testbed else None,
        "topology": None if f.testbed else (f.topology or "switch"),
        "host_bandwidth_Bps": None if f.testbed else bandwidth(f.bandwidth),
        "oversubscription": None if f.testbed else ratio(f.oversubscription),
        "routing": f.routing,
        "spines": f.spines,
        "leaves": f.leaves,
        "ranks_per_host": f.ranks_per_host,
        "calibration": f.calibration,
        "collective_model": model,
        "algorithm": m.algorithm,
    }


def _line_rate(spec: SimulateSpec, cw: CompiledWorkload, nccl: NcclPricer) -> JsonDoc:
    """The iteration and per-collective times of the same replay on the line-rate model (the
    NCCL-like model's side-by-side partner)."""
    # the line-rate model's pricer on the NCCL-like one's fabric (``network_model`` would build
    # the same topology and placement again): the step programs both price are costed once
    # (the NCCL-like model refuses --algorithm and --pricer builtin: step programs, defaults)
    model = spec.model.replace(collective_model="line-rate", nccl_algo=None, nccl_proto=None)
    priced = nccl.twin(parse_algorithms(model.algorithm))
    priced.use_splits(cw.instances.splits)
    # only its iteration time is shown: no report, no link tracking (neither changes a time),
    # and the unperturbed replay a perturbation adds serves the report only
    iteration_s = makespan(cw, AnalyticalBackend(priced), spec.symmetry)
    return {
        "model": "line-rate (step programs at the links' rates, no NCCL latencies or protocols)",
        "network": describe(priced),
        "iteration_s": iteration_s,
    }
