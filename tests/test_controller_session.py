"""Controller logic against in-process agents (real AgentCore, fake data plane, fake clock)."""

from __future__ import annotations

import dataclasses

import pytest

from genie.collectives.program import Program, ProgramSpec
from genie.controller import Controller, InProcChannel
from genie.controller.results import stats
from genie.errors import RuntimeFault
from genie.wire import messages as p
from genie.wire.clock import FakeClock
from genie_agent.programs import BUILTIN
from genie_agent.state import AgentCore, Event

SKEWS = {"a0": 0, "a1": 5_000_000, "a2": -3_000_000}  # agent clock - controller clock
DURATION_NS = 4_000_000


class SkewClock:
    def __init__(self, base: FakeClock, skew: int) -> None:
        self.base, self.skew = base, skew

    def now(self) -> int:
        return self.base.t + self.skew


class AutoDataPlane:
    """Completes prepare at once; a Go yields rank r starting r us late, lasting DURATION_NS."""

    def __init__(self, name: str, clock: SkewClock) -> None:
        self.name, self.clock = name, clock
        self.pending: list[Event] = []
        self.fail_run = ""
        self.hang = False
        self.releases = 0

    def endpoint(self):
        return "127.0.0.1", 9000

    def prepare(self, plan, prep, post):
        self.plan = plan
        msg = p.Prepared(job=prep.job, epoch=prep.epoch, ranks=plan.ranks, connections=1, setup_s=0)
        self.pending.append(Event("prepared", prep.job, prep.epoch, msg))

    def go(self, go, start_local_ns, post):
        if self.hang:
            return
        if self.fail_run:
            self.pending.append(Event("run_failed", go.job, go.epoch, error=self.fail_run))
            return
        ranks = []
        for r in self.plan.ranks:
            starts, ends = [], []
            t = start_local_ns + r * 1000
            for _ in range(go.iters + go.warmup):
                starts.append(t)
                ends.append(t + DURATION_NS + r * 100)
                t += DURATION_NS * 2
            ranks.append(
                p.RankResult(
                    rank=r,
                    start=starts,
                    end=ends,
                    step_start=[[s] for s in starts] if go.record_steps else [],
                    step_end=[[e] for e in ends] if go.record_steps else [],
                )
            )
        res = p.Result(
            job=go.job, epoch=go.epoch, program=go.program, warmup=go.warmup, ranks=ranks
        )
        self.pending.append(Event("result", go.job, go.epoch, res))

    def release(self):
        self.releases += 1


@pytest.fixture
def rig():
    base = FakeClock()
    cores, dps = {}, {}
    for name, skew in SKEWS.items():
        clk = SkewClock(base, skew)
        dps[name] = AutoDataPlane(name, clk)
        cores[name] = AgentCore(name, dps[name], clk, dps[name].pending.append)

    def handler(name):
        return lambda frame: [p.encode(m) for m in cores[name].handle(frame)]

    def pump():
        out = []
        for name, core in cores.items():
            while dps[name].pending:
                out += [(name, p.encode(m)) for m in core.on_event(dps[name].pending.pop(0))]
            out += [(name, p.encode(m)) for m in core.tick()]
        return out

    tr = InProcChannel({n: handler(n) for n in cores}, pump, lambda s: base.advance(int(s * 1e9)))
    ctl = Controller(tr, list(cores), base, controller_id="ctl-test")
    return ctl, tr, cores, dps, base


def ring_program(n: int = 3, size: int = 3000) -> Program:
    spec = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=n, size=size, chunks=2)
    return Program(spec, BUILTIN[("selftest", "ring")])


def test_connect_sync_prepare_run_converts_every_agent_clock(rig) -> None:
    ctl, _, cores, dps, _ = rig
    hellos = ctl.connect()
    assert sorted(hellos) == ["a0", "a1", "a2"] and hellos["a1"].data_port == 9000
    est = ctl.sync_clocks(rounds=4)
    assert {a: e.offset_ns for a, e in est.items()} == SKEWS
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    assert [dps[a].plan.ranks for a in SKEWS] == [[0], [1], [2]]
    out = ctl.run(iters=3, warmup=2, record_steps=True)
    assert len(out.instances) == 5 and [x.warmup for x in out.instances] == [True] * 2 + [False] * 3
    # all agents started at the same controller instant despite their skews, so the collective
    # lasts the slowest rank's duration plus its late start
    want = (2 * 1000 + DURATION_NS + 2 * 100) / 1e9
    assert out.times() == pytest.approx([want] * 3)
    assert out.instances[0].start_ns == out.start_at_ns
    assert out.instances[0].step0_spread_ns == 2000
    steps = out.step_times(0)
    assert sorted(steps) == [0, 1, 2]
    # converted to the controller clock: rank r's first step starts r us after the common start
    assert [steps[r][0][0] - out.start_at_ns for r in range(3)] == [0, 1000, 2000]
    assert stats(out.times()).p50 == pytest.approx(want)
    ctl.release()
    assert all(c.state.value == "idle" for c in cores.values())
    ctl.close()
    assert all(c.controller is None for c in cores.values())


def test_agent_error_aborts_job_everywhere_and_names_agent(rig) -> None:
    ctl, _, cores, dps, _ = rig
    ctl.connect()
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    dps["a2"].fail_run = "rank 2: CRC mismatch"
    with pytest.raises(RuntimeFault, match=r"a2.*CRC mismatch"):
        ctl.run(iters=1)
    assert all(c.state.value == "idle" for c in cores.values())
    assert dps["a0"].releases == 1 and dps["a1"].releases == 1


def test_lost_agent_detected_within_missed_beats(rig) -> None:
    ctl, tr, _, _, base = rig
    ctl.connect()
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    tr.drop.add("a1")
    t0 = base.t
    with pytest.raises(RuntimeFault, match="agent a1 lost"):
        ctl.run(iters=1)
    assert base.t - t0 <= (3 + 2) * 500_000_000  # detection plus the bounded abort wait


def test_hung_run_times_out_at_plan_bound(rig) -> None:
    ctl, _, _, dps, base = rig
    ctl.connect()
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    dps["a0"].hang = True
    t0 = base.t
    with pytest.raises(RuntimeFault, match=r"timed out.*a0"):
        ctl.run(iters=2, timeout_s=1.0)
    assert 2e9 <= base.t - t0 <= 10e9


def test_stale_reply_is_dropped(rig) -> None:
    ctl, tr, _, _, _ = rig
    ctl.connect()
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    old = p.Result(job="old-job", epoch=0, program=0, warmup=0, ranks=[])
    tr.inbox.append(("a0", p.encode(old)))
    tr.inbox.append(("a0", b"garbage"))
    out = ctl.run(iters=1)
    assert len(out.instances) == 1


def test_late_error_of_an_ended_job_does_not_fail_the_next_wait(rig) -> None:
    ctl, tr, _, _, _ = rig
    ctl.connect()
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    ended = ctl.job
    ctl.abort("test")
    # a run error the agent sent before it saw the abort, delivered after it
    late = p.Error(job=ended, epoch=ctl.epoch, code="run", message="iteration timed out")
    tr.inbox.append(("a1", p.encode(late)))
    est = ctl.sync_clocks(rounds=2)  # waits with match_job=False: must not take it as an answer
    assert sorted(est) == ["a0", "a1", "a2"]
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    tr.inbox.append(("a1", p.encode(late)))
    assert len(ctl.run(iters=1).instances) == 1


def test_a_busy_controller_does_not_lose_idle_agents(rig) -> None:
    ctl, _, cores, _, base = rig
    ctl.connect()
    base.advance(10_000_000_000)  # the controller did something else for 10 s
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])  # queued beats count before silence
    assert all(c.state.value == "prepared" for c in cores.values())
    assert len(ctl.run(iters=1).instances) == 1


def test_offsets_are_re_estimated_when_old(rig) -> None:
    ctl, tr, _, _, base = rig
    ctl.connect()
    ctl.sync_clocks(rounds=2)
    ctl.prepare([ring_program()], ["a0", "a1", "a2"])
    probes = lambda: sum(1 for _, f in tr.sent if p.decode(f).__class__ is p.TimeProbe)  # noqa: E731
    n0 = probes()
    ctl.run(iters=1)
    assert probes() == n0  # fresh: no resync
    base.advance(int((ctl.resync_s + 1) * 1e9))
    ctl.run(iters=1)
    assert probes() == n0 + 3 * 2  # 3 agents x 2 rounds


def test_an_outage_is_allowed_per_iteration_of_a_go_and_once_per_op_list_run(rig) -> None:
    ctl, _, _, dps, _ = rig
    ctl.connect()
    programs = [ring_program(), ring_program(size=6000)]
    agents = ["a0", "a1", "a2"]
    bounds: list[float] = []

    def recording(real):
        def go(msg, start, post):
            bounds.append(msg.timeout_s)
            real(msg, start, post)

        return go

    for dp in dps.values():
        dp.go = recording(dp.go)

    def op_list_bound(outage_s: float) -> float:
        ctl.to = dataclasses.replace(ctl.to, outage_s=outage_s)
        ctl.prepare(programs, agents)
        for dp in dps.values():
            dp.hang = True
        with pytest.raises(RuntimeFault, match="timed out"):
            ctl.run_oplists({r: [(0, [], 0), (1, [], 0)] for r in range(3)}, agents)
        for dp in dps.values():
            dp.hang = False
        return bounds[-1]

    ctl.prepare(programs, agents)
    ctl.run(iters=2)
    plain = bounds[-1]
    ctl.to = dataclasses.replace(ctl.to, outage_s=7.0)
    ctl.run(iters=2)
    assert bounds[-1] == pytest.approx(plain + 7.0)  # each iteration may be the one cut off
    ctl.release()
    # an op list of two programs lives through the outage once, not once per program
    assert op_list_bound(7.0) == pytest.approx(op_list_bound(0.0) + 7.0)


def test_back_to_back_iterations_count_a_ranks_run_ahead_once() -> None:
    from genie.controller.results import completion_times

    ms = 1_000_000

    def result(rank: int, start: list[int], end: list[int], off: int) -> p.Result:
        rr = p.RankResult(
            rank=rank, start=[t * ms + off for t in start], end=[t * ms + off for t in end]
        )
        return p.Result(program=0, warmup=1, ranks=[rr])

    # every iteration moves for 40 ms; rank 0's sends are taken by its kernel at once, so it
    # begins each next iteration when its own receive is in, 25 ms before rank 1 is done
    r0 = result(0, [0, 40, 80, 120], [40, 80, 120, 160], off=7 * ms)
    r1 = result(1, [0, 65, 105, 145], [65, 105, 145, 185], off=-3 * ms)
    got = completion_times({"a": r0, "b": r1}, {"a": 7 * ms, "b": -3 * ms})
    # the first from the common start; then each from the previous end (start to end would
    # read 65 ms: the 40 ms it moved plus the 25 ms rank 0 ran ahead)
    assert [x.time_s * 1e3 for x in got] == pytest.approx([65, 40, 40, 40])
    assert [x.warmup for x in got] == [True, False, False, False]
    assert [(x.start_ns // ms, x.end_ns // ms) for x in got] == [
        (0, 65), (40, 105), (80, 145), (120, 185)
    ]  # fmt: skip
    # iterations that do not overlap keep start to end
    r0 = result(0, [0, 70], [50, 110], off=0)
    r1 = result(1, [0, 72], [60, 100], off=0)
    got = completion_times({"a": r0, "b": r1}, {})
    assert [x.time_s * 1e3 for x in got] == pytest.approx([60, 40])
