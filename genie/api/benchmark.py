"""``bench``: one collective swept over sizes on a live testbed, nccl-tests style.

Per size: the p50 over measured iterations (and p99, min, max), algbw and busbw (bytes/s), the
cost model's time of the testbed as declared and, with a calibration, of the calibrated model.
Every instance goes to the run store as measured (undilated). ``dilation`` K reports every time
divided by K (bandwidths times K): the lab's links standing for links K times faster.
``faults`` changes links while the sweep runs, timed from ``FAULT_ORIGIN``: the warm-ups of
each size run in a Go of their own, so the clock starts with the first measured iteration.
``BenchResult.to_dict()`` is the document ``genie bench --json`` prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from genie import progress
from genie.api.specs import Spec, bandwidth
from genie.calibration.accuracy import ErrorRow, error_pct
from genie.calibration.dilation import check_dilation, dilation_note, kept_latency
from genie.calibration.model import Calibration, calibrate_topology, conditions_refusal
from genie.calibration.stored import resolve
from genie.collectives import build_program
from genie.collectives.cost import nccl_size
from genie.collectives.nccl_wire import COLLECTIVES as NCCL_COLLECTIVES
from genie.collectives.nccl_wire import NcclStyle
from genie.collectives.program import Program
from genie.collectives.registry import DEFAULT_ALGORITHM, canonical_algorithm, canonical_collective
from genie.collectives.topology import Topology
from genie.controller.admission import check_memory, one_at_a_time
from genie.controller.results import Instance
from genie.controller.session import Timeouts
from genie.controller.stored_run import StoredRun
from genie.controller.sweep import SizeRow, plan_sizes, sweep
from genie.errors import GenieError, UsageError
from genie.faults.effect import fault_effect, fault_windows
from genie.faults.run import plan as plan_faults
from genie.faults.run import scheduler, widen_timeouts
from genie.live.paths import probe_paths
from genie.store import DEFAULT_STORE
from genie.testbed import load_testbed
from genie.testbed.model import Testbed
from genie.units import format_bytes
from genie.wire.clock import ClockEstimate
from genie.wire.messages import DataOptions, RdmaOptions, WireConditions

FAULT_ORIGIN = "the first measured Go of the first size (after its warm-ups)"
JsonDoc = dict[str, object]


class BenchSpec(Spec, frozen=True, kw_only=True):
    """A sweep of one collective over sizes on the testbed file ``testbed``.

    ``sizes``: whole buffers in bytes. ``ranks``: default the testbed's. ``streams``: TCP
    connections per rank pair (default the testbed's flows; run NCCL-style, one per channel).
    ``nccl_channels`` / ``nccl_proto`` (either given): run the ring NCCL-style, with that many
    channels (default 1; each its own connection) and protocol (simple, ll128, ll; default
    simple), in chunks of the protocol's size (``nccl_buffsize``: its buffer, 0 NCCL's default;
    ``genie.collectives.nccl_wire``). ``sndbuf``/``rcvbuf``: socket
    buffers in bytes (0: the kernel's autotuning). ``slow_rate`` and ``timeout_margin`` bound
    the controller's waits. ``store``: the run store (None: do not record).
    """

    testbed: str
    collective: str = "all_reduce"
    algorithm: str | None = None
    sizes: tuple[int, ...] = (1024,)
    iters: int = 20
    warmup: int = 5
    ranks: int | None = None
    placement: str = "testbed"
    chunks: int = 1
    streams: int | None = None
    sndbuf: int = 0
    rcvbuf: int = 0
    verify: bool = True
    transport: str | None = None  # "tcp" | "rdma"; None: the testbed file's
    slow_rate: float | str = "160mbit"
    timeout_margin: float = 4.0
    calibration: str | None = None  # an id, "latest" or None/"none"
    dilation: float = 1.0
    faults: str | None = None
    congestion: str | None = None  # TCP congestion control (None: the testbed's [tcp])
    repeats: int = 1  # each size run this many times over (its own prepare, warm-up, iterations)
    nccl_channels: int = 0  # 0: not NCCL-style (unless nccl_proto is given)
    nccl_proto: str | None = None
    nccl_buffsize: int = 0
    store: str | None = DEFAULT_STORE
    command: str = "genie bench"
    progress: bool = True


@dataclass
class BenchResult:
    """What a sweep measured, beside the models (``to_dict()``: ``genie bench --json``)."""

    run_id: str | None
    collective: str  # the canonical names actually run
    algorithm: str
    rows: list[SizeRow]  # one per size, as reported (divided by the dilation)
    offsets: dict[str, ClockEstimate]  # each agent's clock offset
    model: str  # which fabric the nominal model priced
    streams: int
    dilation: float
    calibration: Calibration | None
    notes: list[str] = field(default_factory=list)
    faults: JsonDoc | None = None  # the faults as applied and their effect per size
    # per agent, what its data connections ran under (read back: congestion control, buffers,
    # MTU, qdisc, sysctls, kernel); and TCP segments the sweep retransmitted (-1: unknown)
    conditions: dict[str, WireConditions] = field(default_factory=dict)
    retransmits: int = -1
    style: str | None = None  # how the collective ran when not genie's own way (NCCL-style)

    def error_rows(self) -> list[ErrorRow]:
        """The sweep's rows as model-error rows (measured p50 vs nominal vs calibrated)."""
        return [
            ErrorRow(
                f"{self.collective} n={r.n_ranks}", r.size, r.stats.p50, r.modeled_s, r.calibrated_s
            )
            for r in self.rows
        ]

    def to_dict(self) -> JsonDoc:
        """The ``genie bench --json`` document (bytes, seconds, bytes/s)."""
        cal = self.calibration
        return {
            "run_id": self.run_id,
            "collective": self.collective,
            "algorithm": self.algorithm,
            "units": {"time": "s", "bandwidth": "bytes/s", "size": "bytes"},
            "model": "genie cost model of " + self.model,
            "streams": self.streams,
            "calibration": cal.cal_id if cal else None,
            "calibrated_model": cal.describe() if cal else None,
            "dilation": self.dilation,
            "notes": self.notes,
            "clock_offsets": {a: msgspec.to_builtins(e) for a, e in self.offsets.items()},
            "rows": rows_json(self.rows),
            "conditions": {a: msgspec.to_builtins(c) for a, c in self.conditions.items()},
            "retransmits": self.retransmits,
            **({"faults": self.faults} if self.faults is not None else {}),
            **({"style": self.style} if self.style is not None else {}),
        }


def bench(spec: BenchSpec, *, timeouts: Timeouts | None = None) -> BenchResult:
    """Run the sweep ``spec`` describes, storing as it goes (``timeouts``: the controller's)."""
    if not Path(spec.testbed).is_file():
        raise UsageError(f"testbed file not found: {spec.testbed}")
    tb = load_testbed(spec.testbed)
    k = check_dilation(spec.dilation)
    fault_plan = plan_faults(spec.faults, tb, k)
    base = timeouts or Timeouts(slow_rate=bandwidth(spec.slow_rate), margin=spec.timeout_margin)
    waits = widen_timeouts(base, fault_plan) if fault_plan else base
    coll = canonical_collective(spec.collective)
    algo = canonical_algorithm(coll, spec.algorithm or DEFAULT_ALGORITHM[coll])
    placement = tb.rank_host_names(tb.place(spec.ranks, spec.placement))
    rph = max(h.ranks for h in tb.hosts)
    style = nccl_style(spec, coll, algo, spec.transport or tb.transport)
    if style is None:
        programs = plan_sizes(
            coll, algo, len(placement), spec.sizes, chunks=spec.chunks, ranks_per_host=rph
        )
    else:
        programs = [
            build_program(
                coll,
                algo,
                len(placement),
                s,
                ranks_per_host=rph,
                size_convention="nccl",
                style=style,
            )
            for s in spec.sizes
        ]
    # the flows the model prices, on the wire (NCCL-style: one connection per channel)
    streams = spec.streams or (style.channels if style else tb.routing.flows)
    if style is not None and streams % style.channels:
        raise UsageError(
            f"--streams {streams} with {style.channels} NCCL channels: give a multiple of "
            f"{style.channels} (each channel its own connections)"
        )
    topology: Topology | None
    try:
        topology = tb.with_flows(streams).to_topology()
    except (GenieError, ValueError, KeyError):
        topology = None
    cal = resolve(spec.calibration, spec.store, tb.name, topology)
    calibrated = calibrate_topology(topology, cal) if cal and topology else None
    opts = DataOptions(
        congestion=spec.congestion or tb.tcp.congestion_control,
        streams=streams,
        sndbuf=spec.sndbuf,
        rcvbuf=spec.rcvbuf,
        verify=spec.verify,
        transport=spec.transport or tb.transport,
        rdma=RdmaOptions(devices={h.name: h.rdma_device for h in tb.hosts if h.rdma_device}),
    )
    meta: JsonDoc = {
        "collective": coll,
        "algorithm": algo,
        "sizes": list(spec.sizes),
        "iters": spec.iters,
        "warmup": spec.warmup,
        "placement": placement,
        "options": msgspec.to_builtins(opts),
        "calibration": cal.cal_id if cal else None,
        "dilation": k,
        **({"style": style.describe()} if style else {}),
    }
    rows: list[SizeRow] = []
    faults: JsonDoc | None = None
    with StoredRun(
        tb, spec.testbed, spec.command, store=spec.store, meta=meta, timeouts=waits
    ) as run:
        assert run.ctl is not None  # StoredRun connected it on entering
        # the sweep prepares one size at a time: its largest must fit each host's memory
        facts = {a: h.facts for a, h in run.hellos.items()}
        check_memory(one_at_a_time(programs, placement), facts)
        paths_note = None
        if topology is not None and programs:  # the model on the paths the fabric gives them
            paths, paths_note = probe_paths(run.ctl, tb, topology, programs[0], placement, opts)
            if paths is not None:
                topology = topology.with_paths(paths)
                calibrated = calibrated.with_paths(paths) if calibrated else None
        run_id, offsets = run.run_id, run.offsets
        what = f"{coll}/{algo} on {len(placement)} ranks"
        shown = progress.bar(what, len(programs), "sizes") if spec.progress else None
        with shown if shown is not None else contextlib.nullcontext() as bar:

            def on_batch(program: Program, batch: list[Instance]) -> None:
                run.add_instances(program.spec, batch, streams=streams)

            def on_size(row: SizeRow) -> None:
                rows.append(row)
                if bar is not None:
                    bar.advance()
                    bar.describe(f"{coll}/{algo} {format_bytes(row.size)} done")

            with contextlib.ExitStack() as undo:
                sched = None
                if fault_plan is not None:
                    clock = run.ctl.clock.now
                    sched = scheduler(fault_plan, clock, spec.testbed)
                    undo.enter_context(sched)
                sweep(
                    run.ctl,
                    programs,
                    placement,
                    iters=spec.iters,
                    warmup=spec.warmup,
                    options=opts,
                    topology=topology,
                    on_size=on_size,
                    on_instances=on_batch if run.store else None,
                    calibrated=calibrated,
                    model_placement=tb.rank_endpoints(placement),
                    on_start=sched.start if sched else None,
                    repeats=spec.repeats,
                )
            if sched is not None:
                faults = fault_doc(sched.records(), sched.start_at_ns, rows)
                run.update_meta(faults=faults)
        conditions = dict(run.ctl.conditions)
        retransmits = sum(run.ctl.retransmits.values()) if run.ctl.retransmits else -1
        refused = conditions_refusal(cal, conditions)
        if refused:  # priced, but under other conditions than its fit: not applied
            cal, calibrated = None, None
            rows = [dataclasses.replace(r, calibrated_s=None) for r in rows]
            run.update_meta(calibration=None, calibration_refused=refused)
    notes: list[str] = [paths_note] if paths_note else []
    if refused:
        notes.append(refused)
    lab = calibrated or topology
    if k != 1 and lab is not None:
        notes.append(_dilation_note(programs, placement, lab, k, cal, tb))
    return BenchResult(
        run_id,
        coll,
        algo,
        [dilate(r, k) for r in rows] if k != 1 else rows,
        offsets,
        tb.with_flows(streams).model_note(),
        streams,
        k,
        cal,
        notes,
        faults,
        conditions,
        retransmits,
        style.describe() if style else None,
    )


def nccl_style(spec: BenchSpec, coll: str, algo: str, transport: str) -> NcclStyle | None:
    """The NCCL style ``spec`` asks for (None: genie's own way); a UsageError line when the
    collective, algorithm or transport cannot run it."""
    if not spec.nccl_channels and spec.nccl_proto is None:
        return None
    if coll not in NCCL_COLLECTIVES or algo != "ring":
        raise UsageError(
            f"NCCL-style runs the ring of {', '.join(NCCL_COLLECTIVES)}, not {coll}/{algo}"
        )
    try:
        style = NcclStyle(spec.nccl_channels or 1, spec.nccl_proto or "simple", spec.nccl_buffsize)
    except GenieError as exc:
        raise UsageError(str(exc)) from None
    if transport == "rdma" and (style.channels > 1 or style.proto != "simple"):
        raise UsageError(
            "NCCL-style channels > 1 or LL / LL128 run on the tcp transport only (the RDMA "
            "plane keeps one QP per rank pair and carries no flag bytes)"
        )
    return style


def fault_doc(records: JsonDoc, origin_ns: int | None, rows: Sequence[SizeRow]) -> JsonDoc:
    """The faults as applied with, per size, the measured iterations that overlapped a fault
    vs those that overlapped none (p50 each; seconds from ``FAULT_ORIGIN``)."""
    if origin_ns is None:  # the sweep ended before its first measured Go
        return {**records, "time_origin": FAULT_ORIGIN, "run_end_s": 0.0, "by_size": []}
    per_size = [
        (
            r.size,
            [
                {"start_s": (x.start_ns - origin_ns) / 1e9, "makespan_s": x.time_s}
                for x in r.instances
                if not x.warmup
            ],
        )
        for r in rows
    ]
    end = max((x["start_s"] + x["makespan_s"] for _, xs in per_size for x in xs), default=0.0)
    windows = fault_windows(records, end)
    by_size = [{"size": size, **fault_effect(xs, windows)} for size, xs in per_size]
    return {**records, "time_origin": FAULT_ORIGIN, "run_end_s": end, "by_size": by_size}


def _dilation_note(
    programs: Sequence[Program],
    placement: Sequence[str],
    lab: Topology,
    k: float,
    cal: Calibration | None,
    tb: Testbed,
) -> str:
    """What dilation by ``k`` did not scale, and how much that matters per size (model)."""
    items = [
        (p.spec.collective, nccl_size(p), p, list(placement[: p.n_ranks]))
        for p in programs
        if p.n_ranks <= len(placement)
    ]
    try:
        effects = kept_latency(items, lab, k)
    except GenieError as exc:
        return f"dilation x{k:g}: the model cannot price what does not scale ({exc})"
    model = cal.label if cal else f"nominal, {tb.model_source}"
    pick = effects if len(effects) <= 4 else [effects[0], effects[len(effects) // 2], effects[-1]]
    return dilation_note(k, lab, model, [(format_bytes(e.size), e.pct) for e in pick])


def dilate(row: SizeRow, k: float) -> SizeRow:
    """A sweep row as on a fabric ``k`` times faster: every time / k, bandwidths x k."""

    def div(t: float | None) -> float | None:
        return None if t is None else t / k

    st = row.stats
    stats = msgspec.structs.replace(
        st, p50=st.p50 / k, p99=st.p99 / k, min=st.min / k, max=st.max / k, mean=st.mean / k
    )
    return dataclasses.replace(
        row,
        stats=stats,
        algbw=row.algbw * k,
        busbw=row.busbw * k,
        modeled_s=div(row.modeled_s),
        calibrated_s=div(row.calibrated_s),
    )


def rows_json(rows: Sequence[SizeRow]) -> list[JsonDoc]:
    """Rows as JSON-ready dicts (bytes, seconds, bytes/s)."""
    return [
        {
            "size": r.size,
            "count": r.count,
            "type": r.dtype,
            "n_ranks": r.n_ranks,
            "time_p50_s": r.stats.p50,
            "time_p99_s": r.stats.p99,
            "time_min_s": r.stats.min,
            "time_max_s": r.stats.max,
            "iterations": r.stats.n,
            "algbw_Bps": r.algbw,
            "busbw_Bps": r.busbw,
            "modeled_s": r.modeled_s,
            "measured_over_modeled": r.ratio,
            "calibrated_s": r.calibrated_s,
            "nominal_error_pct": error_pct(r.modeled_s, r.stats.p50),
            "calibrated_error_pct": error_pct(r.calibrated_s, r.stats.p50),
            "repeat_p50_s": r.repeat_p50_s,
            "repeat_spread": r.spread,
        }
        for r in rows
    ]
