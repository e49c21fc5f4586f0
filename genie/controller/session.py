"""The controller: claim agents, sync clocks, prepare a job, start it in sync, gather results.

``Controller`` is transport- and clock-agnostic (see ``channel.py``), so tests drive it with
in-process agents and a fake clock. Every wait is bounded: by a deadline derived from the plan
(bytes a rank moves / a slow rate x margin, plus a base), and by the heartbeat rule (an agent
silent for ``MISSED_BEATS_LIMIT`` intervals is lost: judged per agent on every wake-up, whatever
else arrives, right after a zero-length poll has read every frame queued meanwhile; time this
controller itself was not running is no agent's silence). On any failure the job is aborted on every
agent and a ``RuntimeFault`` names the agent and what was being waited for.

Every message after the Hello carries the session secret the agent gave in its HelloReply (the
agent's proof that this controller holds it). ``start_keepalive`` beats from a thread between
phases (while the caller builds programs, prices them or waits on the run store), so agents
never take a busy controller for a dead one. An agent whose control connection drops is judged
at once: its ``Postmortem`` (``genie.controller.postmortem``: agents on this machine) says how
its process ended (exit status, signal, the kernel's OOM kill), and an agent whose address then
refuses connections is lost without waiting for its missed beats. Results are checked against
the Go they answer (ranks, shapes, time ranges) before anything uses them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from genie import __version__
from genie.collectives.program import Op, Program, ProgramSpec
from genie.collectives.registry import max_steps_per_rank
from genie.controller.channel import Channel
from genie.controller.faults import (
    DATA_UNREACHABLE,
    NO_HELLO,
    fault,
)
from genie.controller.link import AgentLink
from genie.controller.results import Instance, check_result, completion_times, step_times
from genie.errors import (
    AgentBusy,
    AgentFault,
    ControlUnreachable,
    DataPlaneError,
    FrameTooLarge,
    GenieError,
    ProtocolError,
    RuntimeFault,
    RunTimeout,
)
from genie.wire.clock import SPIN_NS, Clock, ClockEstimate, MonotonicClock, estimate_offset
from genie.wire.counters import CounterSet
from genie.wire.liveness import HEARTBEAT_INTERVAL_S, MISSED_BEATS_LIMIT
from genie.wire.messages import (
    PROTOCOL_VERSION,
    Abort,
    Ack,
    Bye,
    DataOptions,
    DataProbe,
    DataProbeReply,
    Error,
    Go,
    Hello,
    HelloReply,
    Msg,
    OpItem,
    Prepare,
    Prepared,
    Quit,
    RankOps,
    Release,
    Result,
    TimeProbe,
    TimeReply,
    WireConditions,
)
from genie.wire.tokens import new_token

log = logging.getLogger(__name__)

BUILD_S_PER_STEP = 20e-6  # agents build this fast at worst (2-core VM: 6-13 us a step)

SLOW_RATE = 20e6  # bytes/s: the slowest a rank's traffic is assumed to move, for timeouts
TIMEOUT_MARGIN = 4.0
TIMEOUT_BASE_S = 2.0
RESYNC_S = 30.0  # clocks of different hosts drift (tens of ppm): re-estimate offsets this often


@dataclass
class Timeouts:
    """Bounds of every wait; run/prepare bounds also grow with the plan's bytes."""

    register_s: float = 10.0
    probe_s: float = 1.0
    prepare_base_s: float = 10.0
    slow_rate: float = SLOW_RATE
    margin: float = TIMEOUT_MARGIN
    base_s: float = TIMEOUT_BASE_S
    heartbeat_s: float | None = None  # None: the Controller's heartbeat_s argument
    missed_beats: int | None = None  # None: MISSED_BEATS_LIMIT
    abort_s: float = 2.0  # bound of waiting for abort/bye acknowledgements
    # link outages a run must live through (scheduled faults): added to each iteration's bound
    # of a Go, and once to an op-list run's bound
    outage_s: float = 0.0


@dataclass
class RunOutcome:
    """What one Go produced: per-iteration completion times and the raw per-agent results."""

    program: ProgramSpec
    instances: list[Instance]
    results: dict[str, Result]
    start_at_ns: int
    lateness_ns: dict[str, int] = field(default_factory=dict)
    offsets_ns: dict[str, int] = field(default_factory=dict)

    def times(self, include_warmup: bool = False) -> list[float]:
        """Completion times in seconds."""
        return [x.time_s for x in self.instances if include_warmup or not x.warmup]

    def step_times(self, iteration: int = 0) -> dict[int, list[tuple[int, int]]]:
        """Per rank, (start, end) of each step of ``iteration``, controller clock ns."""
        return step_times(self.results, self.offsets_ns, iteration)


@dataclass
class OpListOutcome:
    """What one Go of op lists produced: each agent's Result and its clock offset."""

    start_at_ns: int  # the common start, controller clock
    results: dict[str, Result]
    offsets_ns: dict[str, int]  # agent -> agent clock - controller clock


OpList = Sequence[tuple[int, Sequence[int], int]]  # per op: (program index, deps, gap ns)


CountersHook = Callable[[ProgramSpec | None, int, dict[str, list[CounterSet]]], None]
"""on_counters(spec or None for op lists, iterations with warm-up, agent -> counter sets)."""


def rank_bytes(program: Program) -> int:
    """Most bytes any rank of ``program`` sends plus receives (for timeouts)."""
    best = 0
    for _, steps in program.iter_ranks():
        best = max(best, sum(s.nbytes for s in steps if s.op in (Op.SEND, Op.RECV)))
    return best


class Controller(AgentLink):
    """Drives a set of agents through jobs over a Channel (its waits: ``AgentLink``)."""

    def __init__(
        self,
        transport: Channel,
        agents: Sequence[str],
        clock: Clock | None = None,
        *,
        controller_id: str | None = None,
        timeouts: Timeouts | None = None,
        heartbeat_s: float = HEARTBEAT_INTERVAL_S,
        missed_beats_limit: int = MISSED_BEATS_LIMIT,
        testbed: str = "",
        keepalive: bool = False,
    ) -> None:
        to = timeouts or Timeouts()
        super().__init__(
            transport,
            clock or MonotonicClock(),
            controller_id or f"ctl-{os.getpid()}-{uuid.uuid4().hex[:6]}",
            int((to.heartbeat_s or heartbeat_s) * 1e9),
            to.missed_beats or missed_beats_limit,
        )
        self.agents = list(agents)
        self.to = to
        self.offsets: dict[str, ClockEstimate] = {}
        self.programs: list[Program] = []
        # what the agents' data connections run under, as each read them back at its last
        # Prepare; and TCP segments retransmitted over this controller's runs (per agent)
        self.conditions: dict[str, WireConditions] = {}
        self.retransmits: dict[str, int] = {}
        # told each accepted Go's NIC and stack counter deltas where agents report any:
        # (its program's spec, None for op lists; iterations with warm-up; agent -> sets)
        self.on_counters: CountersHook | None = None
        self.placement: list[str] = []
        self._synced_at: int | None = None
        self._sync_rounds = 16
        self.resync_s = RESYNC_S
        self._rank_bytes: dict[int, int] = {}  # id(program) -> rank_bytes, current job's programs
        self.testbed = testbed  # identity named in Hello (agents of another testbed refuse)
        self.auto_keepalive = keepalive  # start_keepalive once connected (real transports)
        # what the testbed adds to a job's data options (intra-host model, ranks' NIC
        # addresses): set by ``open_controller``; (options, placement) -> options
        self.job_options: Callable[[DataOptions, Sequence[str]], DataOptions] | None = None

    # ---- phases ---------------------------------------------------------------------------
    def connect(self) -> dict[str, HelloReply]:
        """Claim every agent; check protocol versions; return their hellos.

        An agent that does not answer in time is described (nothing listening, not a genie
        agent, handshake refused) in an ``AgentUnreachable`` naming it. An agent that says it is
        busy is asked again for as long as a holder that just left takes to be let go (its
        missed beats), then the refusal stands.
        """
        tries = 2 * (self.missed_limit + 1)  # half-beat pauses: the holder's missed beats, plus one
        self.sessions = {}
        for attempt in range(1, tries + 1):
            try:
                replies = self._hello_round(attempt, last=attempt == tries)
                break
            except AgentBusy:
                if attempt == tries:
                    raise
                time.sleep(self.hb_ns / 2e9)  # a holder that just closed may still be on record
        for a, r in replies.items():
            assert isinstance(r, HelloReply)
            if r.protocol != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"agent {a} speaks protocol {r.protocol}, not {PROTOCOL_VERSION}"
                )
            if r.agent != a:
                raise ProtocolError(f"agent at the address of {a} says it is {r.agent!r}")
            if r.version != __version__:
                log.warning("agent %s runs genie %s, controller %s", a, r.version, __version__)
        self.hello = {a: replies[a] for a in self.agents}  # type: ignore[misc]
        self.sessions = {a: h.session for a, h in self.hello.items()}
        self._dropped_at = {}
        if self.postmortem is not None:
            self.postmortem.watch(self.hello)
        if self.auto_keepalive:
            self.start_keepalive()
        for a, h in self.hello.items():
            log.info(
                "agent %s: genie %s on %s, data %s:%d, pid %d",
                a,
                h.version,
                h.facts.hostname,
                h.data_addr,
                h.data_port,
                h.pid,
            )
        return self.hello

    def _unanswered(self, exc: RunTimeout) -> AgentFault:
        """The hello timeout, saying per silent agent what its connection did."""
        silent = [a for a in self.agents if a not in self.sessions]
        if not silent:
            return exc
        for a in silent:  # a refusal the last wait did not see yet is still a refusal
            if a in self.t.refused:
                return self._refusal(a, "hello")
        by_reason: dict[str, list[str]] = {}
        for a in silent:
            by_reason.setdefault(self.t.describe(a), []).append(a)
        parts = [f"{', '.join(names)}: {why}" for why, names in by_reason.items()]
        return fault(
            NO_HELLO,
            f"no hello from agent{'s' if len(silent) > 1 else ''} {', '.join(silent)} within "
            f"{self.to.register_s:.3g} s ({'; '.join(parts)})",
            *silent,
        )

    def sync_clocks(self, rounds: int = 16) -> dict[str, ClockEstimate]:
        """NTP-style offset of every agent (min-RTT of ``rounds`` probes each)."""
        for a in self.agents:
            samples = []
            for _ in range(rounds):
                t0 = self.clock.now()
                self._send(a, TimeProbe(job=self.job, epoch=self.epoch, t0=t0))
                rep = self._wait(TimeReply, [a], self.to.probe_s, "clock probe", match_job=False)[a]
                t3 = self.clock.now()
                assert isinstance(rep, TimeReply)
                if rep.t0 == t0:
                    samples.append((t0, rep.t1, rep.t2, t3))
            if not samples:
                raise RuntimeFault(f"no clock samples from agent {a}")
            self.offsets[a] = est = estimate_offset(samples)
            log.info(
                "clock of %s: offset %+d ns, uncertainty %d ns (%d samples)",
                a,
                est.offset_ns,
                est.uncertainty_ns,
                est.samples,
            )
        self._synced_at = self.clock.now()
        self._sync_rounds = rounds
        return self.offsets

    def prepare(
        self,
        programs: Sequence[Program],
        placement: Sequence[str],
        options: DataOptions | None = None,
        timeout_s: float | None = None,
    ) -> str:
        """Ship programs (as specs) and placement; wait until every agent has connected."""
        if not self.hello:
            raise RuntimeFault("prepare before connect")
        unknown = sorted(set(placement) - set(self.hello))
        if unknown:
            raise RuntimeFault(f"placement names agents not connected: {', '.join(unknown)}")
        opts = options or DataOptions()
        if self.job_options is not None:
            opts = self.job_options(opts, placement)
        if not opts.token:
            opts.token = new_token()
        self.epoch += 1
        self.job = f"{self.id}-j{self.epoch}"
        self.programs = list(programs)
        self.placement = list(placement)
        endpoints = {a: f"{h.data_addr}:{h.data_port}" for a, h in self.hello.items()}
        prep = Prepare(
            job=self.job,
            epoch=self.epoch,
            programs=[p.to_bytes() for p in programs],
            placement=self.placement,
            endpoints=endpoints,
            options=opts,
        )
        involved = sorted(set(self.placement))
        total = sum(p.spec.size for p in programs)
        build = sum(max_steps_per_rank(p.spec) for p in programs) * BUILD_S_PER_STEP
        bound = timeout_s or (self.to.prepare_base_s + opts.connect_timeout_s + total / 1e9 + build)
        try:
            for a in involved:
                self._send(a, prep)
            ready = self._wait(Prepared, involved, bound, "prepare")
            for a, m in ready.items():
                if isinstance(m, Prepared):
                    self.conditions[a] = m.conditions
        except FrameTooLarge as exc:  # refused at the first send: the same size for every agent
            self.abort("prepare failed")
            raise FrameTooLarge(
                f"{exc}: the job's programs do not fit in one Prepare (every program's spec, "
                "an all-to-all-v's n x n sizes included, goes to every agent); run fewer "
                "collectives or ranks per job",
                size=exc.size,
                limit=exc.limit,
            ) from None
        except GenieError:
            self.abort("prepare failed")
            raise
        log.info(
            "job %s prepared on %s: %d program(s)", self.job, ", ".join(involved), len(programs)
        )
        return self.job

    def default_spin_ns(self) -> int:
        """Busy-wait before a start (SPIN_NS) only where every agent has a CPU of its own."""
        per_host: dict[str, list[HelloReply]] = {}
        for h in self.hello.values():
            per_host.setdefault(h.facts.hostname, []).append(h)
        crowded = any(len(hs) > max(1, hs[0].facts.cpus_logical) for hs in per_host.values())
        return 0 if crowded else SPIN_NS

    def iteration_timeout(self, program: Program) -> float:
        """Bound of one iteration: bytes a rank moves / slow rate x margin + base."""
        key = id(program)
        if key not in self._rank_bytes:  # walking every rank's steps is slow for big programs
            self._rank_bytes = {k: v for k, v in self._rank_bytes.items() if k in self._live_ids()}
            self._rank_bytes[key] = rank_bytes(program)
        return self.to.base_s + self._rank_bytes[key] / self.to.slow_rate * self.to.margin

    def _live_ids(self) -> set[int]:
        return {id(p) for p in self.programs}

    def run(
        self,
        program: int = 0,
        iters: int = 1,
        warmup: int = 0,
        *,
        lead_s: float | None = None,
        timeout_s: float | None = None,
        record_steps: bool = False,
        spin_ns: int | None = None,
        rt_start: bool = True,
        on_start: Callable[[int], None] | None = None,
    ) -> RunOutcome:
        """Start program ``program`` on every agent at one controller instant; gather times.

        ``rt_start``: agents wait for the start under SCHED_FIFO and drop back to normal
        scheduling as the first step begins (where the agent may; silently ignored otherwise).
        ``on_start`` is told the common start (controller clock ns) before any Go is sent.
        """
        if not self.job:
            raise RuntimeFault("run before prepare")
        prog = self.programs[program]
        per_iter = timeout_s or self.iteration_timeout(prog) + self.to.outage_s
        involved = sorted(set(self.placement))
        lead = lead_s if lead_s is not None else 0.005 + 0.0015 * len(involved)
        self._resync_if_due()
        spin = self.default_spin_ns() if spin_ns is None else spin_ns
        start_at = self.clock.now() + int(lead * 1e9)
        if on_start is not None:
            on_start(start_at)
        for a in involved:
            est = self.offsets.get(a)
            self._send(
                a,
                Go(
                    job=self.job,
                    epoch=self.epoch,
                    program=program,
                    iters=iters,
                    warmup=warmup,
                    start_at=start_at,
                    offset=est.offset_ns if est else 0,
                    timeout_s=per_iter,
                    record_steps=record_steps,
                    spin_ns=spin,
                    rt_start=rt_start,
                ),
            )
        bound = lead + per_iter * (iters + warmup) + self.to.base_s
        try:
            got = self._wait(Result, involved, bound, f"{prog!r}")
        except GenieError as exc:
            self.abort("run failed")
            if isinstance(exc, RunTimeout | DataPlaneError) and not self.lost:
                where = self.locate_data_fault(involved)
                if where:
                    raise fault(DATA_UNREACHABLE, f"{exc}; {where}", *exc.agents) from None
            raise
        results = {a: r for a, r in got.items() if isinstance(r, Result)}
        self._count_retransmits(results)
        ranks_of = self._ranks_of(prog.spec.ranks or range(prog.spec.n_ranks))
        steps = max_steps_per_rank(prog.spec) if record_steps else 0
        self._check_results(results, ranks_of, iters + warmup, steps, start_at, program, warmup)
        offs = {a: (self.offsets[a].offset_ns if a in self.offsets else 0) for a in results}
        instances = completion_times(results, offs)
        empty = [x.iteration for x in instances if x.time_s <= 0]
        if empty:  # a collective takes time: a zero time would be an infinite bandwidth
            self.abort("malformed result")
            raise RuntimeFault(
                f"agents {', '.join(sorted(results))} sent a malformed result: iteration "
                f"{empty[0]} of {prog!r} took 0 ns ({len(empty)} of {len(instances)} such)"
            )
        self._report_counters(prog.spec, iters + warmup, results)
        return RunOutcome(
            program=prog.spec,
            instances=instances,
            results=results,
            start_at_ns=start_at,
            lateness_ns={a: r.start_lateness_ns for a, r in results.items()},
            offsets_ns=offs,
        )

    def run_oplists(
        self,
        rank_ops: Mapping[int, OpList],
        rank_agents: Sequence[str],
        *,
        lead_s: float | None = None,
        after: dict[int, list[list[int]]] | None = None,
        on_start: Callable[[int], None] | None = None,
        instance_program: Sequence[int] | None = None,
    ) -> OpListOutcome:
        """Start every rank's op list over the prepared programs at one controller instant.

        ``rank_ops``: rank -> its ops in order, each (instance id, indices of earlier ops it
        waits for, compute gap in ns before it); ``instance_program``: instance id -> index of
        the prepared program it runs (None: the instance id is the program's index, each used
        once); ``rank_agents``: rank -> agent; ``after``: rank -> per op the earlier ops it waits
        for in issue order (no gap); ``on_start`` is told the common start (controller clock ns)
        before any Go is sent. The wait is bounded by every instance's iteration timeout plus
        the longest rank's gaps, plus the base; on failure the job is aborted everywhere.
        """
        if not self.job:
            raise RuntimeFault("run before prepare")
        involved = sorted(set(rank_agents))
        self._resync_if_due()
        gaps = max((sum(g for _, _, g in ops) for ops in rank_ops.values()), default=0)
        per_program = [self.iteration_timeout(p) for p in self.programs]
        if instance_program is None:
            timeout = sum(per_program)
        else:
            timeout = sum(per_program[k] for k in instance_program)
        timeout += gaps / 1e9
        timeout += self.to.base_s + self.to.outage_s
        lead = lead_s if lead_s is not None else 0.01 + 0.002 * len(involved)
        start_at = self.clock.now() + int(lead * 1e9)
        if on_start is not None:
            on_start(start_at)
        for a in involved:
            est = self.offsets.get(a)
            ops = [
                RankOps(
                    rank=r,
                    ops=[
                        OpItem(
                            program=p if instance_program is None else instance_program[p],
                            deps=list(d),
                            gap_ns=g,
                            after=list(o),
                            instance=-1 if instance_program is None else p,
                        )
                        for (p, d, g), o in zip(
                            rank_ops[r],
                            (after or {}).get(r) or [[]] * len(rank_ops[r]),
                            strict=True,
                        )
                    ],
                )
                for r, ag in enumerate(rank_agents)
                if ag == a and rank_ops.get(r)
            ]
            go = Go(
                job=self.job,
                epoch=self.epoch,
                start_at=start_at,
                offset=est.offset_ns if est else 0,
                timeout_s=timeout,
                spin_ns=self.default_spin_ns(),
                rt_start=True,
                ops=ops,
            )
            self._send(a, go)
        try:
            got = self._wait(
                Result, involved, lead + timeout + self.to.base_s, "the workload's op lists"
            )
        except GenieError:
            self.abort("op-list run failed")
            raise
        results = {a: r for a, r in got.items() if isinstance(r, Result)}
        self._count_retransmits(results)
        ranks_of = self._ranks_of(r for r, ops in rank_ops.items() if ops)
        counts = {r: len(ops) for r, ops in rank_ops.items()}
        self._check_results(results, ranks_of, counts, 0, start_at, 0, None)
        self._report_counters(None, 1, results)
        offs = {a: (self.offsets[a].offset_ns if a in self.offsets else 0) for a in results}
        return OpListOutcome(start_at_ns=start_at, results=results, offsets_ns=offs)

    def _count_retransmits(self, results: Mapping[str, Result]) -> None:
        """Add each agent's retransmitted segments of a Go (where it could count them)."""
        for a, r in results.items():
            if r.retransmits >= 0:
                self.retransmits[a] = self.retransmits.get(a, 0) + r.retransmits

    def _report_counters(
        self, spec: ProgramSpec | None, iterations: int, results: Mapping[str, Result]
    ) -> None:
        """Tell ``on_counters`` the counter deltas the agents reported with a Go (if any)."""
        sets = {a: list(r.counters) for a, r in results.items() if r.counters}
        if sets and self.on_counters is not None:
            self.on_counters(spec, iterations, sets)

    def _ranks_of(self, ranks) -> dict[str, list[int]]:
        """agent -> the global ranks (of ``ranks``) placed on it."""
        out: dict[str, list[int]] = {}
        for r in ranks:
            out.setdefault(self.placement[r], []).append(r)
        return out

    def _check_results(
        self,
        results: dict[str, Result],
        ranks_of: dict[str, list[int]],
        iterations: int | dict[int, int],
        steps: int,
        start_at: int,
        program: int,
        warmup: int | None,
    ) -> None:
        """Refuse (abort, raise) Results that do not fit the Go they answer."""
        now = self.clock.now()
        try:
            for a, res in results.items():
                off = self.offsets[a].offset_ns if a in self.offsets else 0
                check_result(
                    a,
                    res,
                    ranks_of.get(a, []),
                    iterations,
                    steps,
                    window=(start_at + off, now + off),
                    program=program,
                    warmup=warmup,
                )
        except GenieError:
            self.abort("malformed result")
            raise

    def _resync_if_due(self) -> None:
        """Re-estimate clock offsets when the last sync is older than ``resync_s``."""
        synced = self._synced_at
        if synced is not None and self.clock.now() - synced > self.resync_s * 1e9:
            self.sync_clocks(self._sync_rounds)

    def locate_data_fault(self, agents: Sequence[str], timeout_s: float = 1.0) -> str:
        """After a data-plane stall: which agents cannot reach which peers' data ports.

        Every agent TCP-connects to the data listeners of its last job's peers. Returns "" if
        all connect; else a sentence naming the host common to every failed pair (its link is
        the one down) or, if none is common, the failed pairs.
        """
        try:
            for a in agents:
                self._send(a, DataProbe(timeout_s=timeout_s))
            got = self._wait(
                DataProbeReply, agents, timeout_s + self.to.base_s, "data probe", match_job=False
            )
        except GenieError as exc:
            log.warning("data probe failed: %s", exc)
            return ""
        bad = sorted(
            (a, peer)
            for a, rep in got.items()
            if isinstance(rep, DataProbeReply)
            for peer, why in rep.peers.items()
            if why
        )
        if not bad:
            return ""
        common = set.intersection(*({a, b} for a, b in bad))
        pairs = ", ".join(f"{a}->{b}" for a, b in bad[:8])
        if len(common) == 1:
            (host,) = common
            return (
                f"data network: {host} is cut off (unreachable: {pairs}); "
                f"the link of host {host} is down"
            )
        return f"data network: unreachable {pairs}"

    def release(self) -> None:
        """Drop the current job on every agent (connections closed, buffers freed)."""
        if not self.job:
            return
        involved = sorted(set(self.placement))
        for a in involved:
            self._send(a, Release(job=self.job, epoch=self.epoch))
        try:
            self._wait(Ack, involved, self.to.register_s, "release")
        finally:
            self.ended_jobs.add(self.job)
            self.job = ""

    def abort(self, reason: str) -> None:
        """Abort the current job everywhere (best effort, bounded)."""
        if not self.job:
            return
        involved = sorted(set(self.placement) - self.lost)
        for a in involved:
            try:
                self._send(a, Abort(job=self.job, epoch=self.epoch, reason=reason))
            except GenieError:
                continue
        try:
            self._wait(Ack, involved, self.to.abort_s, "abort", errors_ok=True)
        except GenieError as exc:
            log.warning("abort incomplete: %s", exc)
        self.ended_jobs.add(self.job)
        self.job = ""

    def _hello_round(self, attempt: int = 1, last: bool = True) -> dict[str, Msg]:
        """Send every agent a Hello (round ``attempt``, its epoch) and collect every agent's
        answer to it; on failure leave the agents that took it, unless a busy agent is asked
        again (not ``last``): those this controller holds stay held, with their secrets.

        Each agent answers each Hello once, stamped with the Hello's epoch, so an answer of an
        earlier round (a busy refusal, a late HelloReply) is never read as this round's.
        """
        try:
            for a in self.agents:
                self._send(
                    a,
                    Hello(
                        epoch=attempt,
                        controller=self.id,
                        version=__version__,
                        protocol=PROTOCOL_VERSION,
                        testbed=self.testbed,
                    ),
                    "hello",
                )
            try:
                got = self._wait(
                    HelloReply,
                    self.agents,
                    self.to.register_s,
                    "hello",
                    match_job=False,
                    errors_ok=True,
                    hello_round=attempt,
                )
            except RunTimeout as exc:
                raise self._unanswered(exc) from None
            self._refused_hello(got)
            return got
        except AgentBusy:
            if not last:
                raise
            self._leave()
            raise
        except ControlUnreachable as exc:
            self._leave()
            why = self.t.describe(exc.agent) if exc.agent else ""
            text = f"{exc}; {why}" if why else str(exc)
            raise fault(exc.cause, text, *exc.agents) from None
        except GenieError:
            self._leave()  # release the agents that did accept us (their secrets are known)
            raise

    def _refused_hello(self, got: Mapping[str, Msg]) -> None:
        """Raise for the agents that answered the Hello with an Error: any other refusal
        before ``busy`` (which a retry may cure)."""
        errors = sorted((a, m) for a, m in got.items() if isinstance(m, Error))
        errors.sort(key=lambda am: am[1].code == "busy")
        for agent, msg in errors[:1]:
            detail = f"{msg.code}: {msg.message}"
            if msg.code == "malformed":  # an older agent
                detail += (
                    f" (this controller speaks protocol {PROTOCOL_VERSION}: update the "
                    "agent, e.g. `genie deploy`)"
                )
            raise fault(msg.code, f"agent {agent} during hello: {detail}", agent)

    def _leave(self) -> None:
        """Bye to every agent (best effort): those that took this controller's Hello go free."""
        for a in self.agents:
            with contextlib.suppress(GenieError):
                self._send(a, Bye())

    def close(self, quit_agents: bool = False) -> None:
        """Leave the agents (Bye), or stop them (Quit); bounded; never raises."""
        self.stop_keepalive()
        try:
            if self.job:
                self.abort("controller closing")
            msg: Msg = Quit() if quit_agents else Bye()
            targets = [a for a in self.hello if a not in self.lost]
            for a in targets:
                with contextlib.suppress(GenieError):
                    self._send(a, msg)
            self._wait(Ack, targets, self.to.abort_s, "bye", match_job=False, errors_ok=True)
        except GenieError as exc:
            log.warning("close: %s", exc)
        finally:
            self.hello = {}
