"""Agent state machine, driven with an injected clock and a fake data plane (no sleeping)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from genie.collectives.program import ProgramSpec
from genie.wire import messages as p
from genie.wire.clock import FakeClock
from genie.wire.liveness import MISSED_BEATS_LIMIT
from genie_agent.state import AgentCore, Event, State

INTERVAL_NS = 500_000_000


class FakeDataPlane:
    """Records what the core asks for; the test posts the outcomes."""

    def __init__(self) -> None:
        self.prepared: list[p.Prepare] = []
        self.gos: list[tuple[p.Go, int]] = []
        self.releases = 0

    def endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", 4242

    def prepare(self, plan, prep, post) -> None:
        self.prepared.append(prep)
        self.plan = plan

    def go(self, go, start_local_ns, post) -> None:
        self.gos.append((go, start_local_ns))

    def release(self) -> None:
        self.releases += 1


def p2p(size: int = 1024) -> bytes:
    return msgspec_spec(ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=size))


def msgspec_spec(spec: ProgramSpec) -> bytes:
    import msgspec

    return msgspec.msgpack.encode(spec)


@pytest.fixture
def agent():
    clock = FakeClock()
    dp = FakeDataPlane()
    posted: list[Event] = []
    core = AgentCore("a0", dp, clock, posted.append)
    return core, dp, clock


SESSIONS: dict[int, str] = {}  # id(core) -> the secret its claim got (the test controller's)


def send(core: AgentCore, msg: p.Msg, sender: str = "") -> list[p.Msg]:
    """Send as the test controller (sender ""): its messages carry the secret of its claim."""
    if sender == "" and not isinstance(msg, p.Hello):
        msg = msgspec.structs.replace(msg, session=SESSIONS.get(id(core), ""))
    return core.handle(p.encode(msg), sender)


def prepare_msg(epoch: int = 1, job: str = "job1", programs=None) -> p.Prepare:
    return p.Prepare(
        job=job,
        epoch=epoch,
        programs=programs or [p2p()],
        placement=["a0", "a1"],
        endpoints={"a0": "127.0.0.1:1", "a1": "127.0.0.1:2"},
    )


def claim(core: AgentCore) -> None:
    (reply,) = send(core, p.Hello(controller="ctl-1", version="0.1.0"))
    assert isinstance(reply, p.HelloReply) and reply.agent == "a0" and reply.data_port == 4242
    assert len(reply.session) == 32
    SESSIONS[id(core)] = reply.session


def to_prepared(core: AgentCore, epoch: int = 1) -> None:
    claim(core)
    assert send(core, prepare_msg(epoch)) == []
    assert core.state is State.PREPARING
    ok = p.Prepared(job="job1", epoch=epoch, ranks=[0], connections=1, setup_s=0.0)
    assert core.on_event(Event("prepared", "job1", epoch, ok)) == [ok]
    assert core.state is State.PREPARED


def test_full_cycle_idle_prepared_running_idle(agent) -> None:
    core, dp, _clock = agent
    to_prepared(core)
    assert dp.prepared[0].job == "job1"
    assert dp.plan.ranks == [0] and dp.plan.outgoing == [(0, 1)]
    go = p.Go(job="job1", epoch=1, iters=2, start_at=5_000, offset=-1_000)
    assert send(core, go) == []
    assert core.state is State.RUNNING
    assert dp.gos[0][1] == 4_000  # start converted to the agent clock
    res = p.Result(job="job1", epoch=1, program=0, warmup=0, ranks=[])
    assert core.on_event(Event("result", "job1", 1, res)) == [res]
    assert core.state is State.PREPARED
    (ack,) = send(core, p.Release(job="job1", epoch=1))
    assert isinstance(ack, p.Ack) and core.state is State.IDLE and dp.releases == 1


def test_stale_epoch_and_job_are_refused_without_change(agent) -> None:
    core, dp, _ = agent
    to_prepared(core, epoch=5)
    for bad in (
        p.Go(job="job1", epoch=4),
        p.Go(job="other", epoch=5),
        p.Abort(job="job1", epoch=6),
    ):
        (err,) = send(core, bad)
        assert isinstance(err, p.Error) and err.code == "stale"
        assert core.state is State.PREPARED and not dp.gos and dp.releases == 0
    send(core, p.Release(job="job1", epoch=5))
    (err,) = send(core, prepare_msg(epoch=5))  # an epoch already used
    assert err.code == "stale" and core.state is State.IDLE


def test_late_event_of_an_aborted_job_is_dropped(agent) -> None:
    core, dp, _ = agent
    to_prepared(core)
    send(core, p.Go(job="job1", epoch=1))
    (ack,) = send(core, p.Abort(job="job1", epoch=1, reason="test"))
    assert ack.what == "abort" and core.state is State.IDLE and dp.releases == 1
    res = p.Result(job="job1", epoch=1, program=0, warmup=0, ranks=[])
    assert core.on_event(Event("result", "job1", 1, res)) == []
    assert core.state is State.IDLE


def test_malformed_and_wrong_direction_frames_are_answered(agent) -> None:
    core, _, _ = agent
    claim(core)
    for frame in (b"garbage", b"", b"\x92\x01\x02"):
        (err,) = core.handle(frame)
        assert err.code == "malformed"
    (err,) = send(core, p.Ack(what="x"))
    assert err.code == "direction"
    assert core.state is State.IDLE and not core.quit


def test_go_before_prepare_and_prepare_before_hello(agent) -> None:
    core, dp, _ = agent
    (err,) = send(core, prepare_msg())
    assert err.code == "state" and not dp.prepared
    claim(core)
    (err,) = send(core, p.Go(job="", epoch=0))
    assert err.code == "stale"


def test_limits_checked_before_any_allocation(agent) -> None:
    core, dp, _ = agent
    claim(core)
    huge = p2p(size=1 << 40)
    (err,) = send(core, prepare_msg(programs=[huge]))
    assert err.code == "limit" and "limit" in err.message
    assert not dp.prepared and core.state is State.IDLE
    (err,) = send(core, prepare_msg(programs=[b"not a spec"]))
    assert err.code == "limit" and not dp.prepared
    bad = prepare_msg()
    bad.options.streams = 10_000
    (err,) = send(core, bad)
    assert err.code == "limit"


def test_unknown_collective_is_a_program_error(agent) -> None:
    core, dp, _ = agent
    claim(core)
    spec = msgspec_spec(ProgramSpec(collective="nope", algorithm="nope", n_ranks=2, size=8))
    (err,) = send(core, prepare_msg(programs=[spec]))
    assert err.code in ("program", "limit") and not dp.prepared


def test_version_mismatch(agent) -> None:
    core, _, _ = agent
    (err,) = send(core, p.Hello(controller="c", version="9", protocol=99))
    assert err.code == "version" and core.controller is None


def test_second_controller_refused_until_first_is_silent(agent) -> None:
    core, dp, clock = agent
    to_prepared(core)
    (err,) = send(core, p.Hello(controller="ctl-2", version="0.1.0"))
    assert err.code == "busy" and "ctl-1" in err.message and core.state is State.PREPARED
    clock.advance(MISSED_BEATS_LIMIT * INTERVAL_NS)
    (reply,) = send(core, p.Hello(controller="ctl-2", version="0.1.0"))
    assert isinstance(reply, p.HelloReply) and core.controller == "ctl-2"
    assert core.state is State.IDLE and dp.releases == 1


def test_heartbeats_and_missed_beat_counter(agent) -> None:
    core, dp, clock = agent
    to_prepared(core)
    assert core.tick() == []
    clock.advance(INTERVAL_NS)
    (beat,) = core.tick()
    assert isinstance(beat, p.Heartbeat) and beat.seq == 1 and beat.job == "job1"
    assert core.missed_beats() == 1
    send(core, p.Heartbeat(job="job1", epoch=1))
    assert core.missed_beats() == 0
    clock.advance(MISSED_BEATS_LIMIT * INTERVAL_NS)
    out = core.tick()
    assert any(isinstance(m, p.Error) and "lost" in m.message for m in out)
    assert core.state is State.IDLE and dp.releases == 1
    # still claimed, but silent: another controller may now take over
    (reply,) = send(core, p.Hello(controller="ctl-2", version="0.1.0"), sender="other")
    assert isinstance(reply, p.HelloReply) and core.controller == "ctl-2" and core.peer == "other"


def test_time_probe_uses_the_injected_clock(agent) -> None:
    core, _, clock = agent
    (rep,) = send(core, p.TimeProbe(t0=7))
    assert rep.t0 == 7 and rep.t1 == rep.t2 == clock.now()


def test_data_plane_failure_returns_to_idle(agent) -> None:
    core, dp, _ = agent
    to_prepared(core)
    send(core, p.Go(job="job1", epoch=1))
    (err,) = core.on_event(Event("run_failed", "job1", 1, error="rank 1 closed the link"))
    assert err.code == "run" and "closed" in err.message
    assert core.state is State.IDLE and dp.releases == 1


def test_quit(agent) -> None:
    core, _, _ = agent
    (ack,) = send(core, p.Quit())
    assert ack.what == "quit" and core.quit


def test_job_messages_from_another_peer_are_refused(agent) -> None:
    core, dp, _ = agent
    to_prepared(core)
    for msg in (p.Go(job="job1", epoch=1), p.Abort(job="job1", epoch=1), p.Bye(), p.Quit()):
        (err,) = send(core, msg, sender="intruder")
        assert err.code == "busy" and "ctl-1" in err.message
    assert core.state is State.PREPARED and not dp.gos and not core.quit
    (rep,) = send(core, p.TimeProbe(t0=1), sender="intruder")  # harmless, answered
    assert isinstance(rep, p.TimeReply)


@settings(max_examples=300, deadline=None)
@given(
    collective=hs.sampled_from(["flow", "selftest", "all_reduce", "all_to_all", "nope", ""]),
    algorithm=hs.sampled_from(["oneway", "ring", "direct", "tree", "x"]),
    n=hs.integers(-3, 9),
    size=hs.integers(-10, 1 << 20),
    chunks=hs.integers(-2, 1 << 40),
    placement=hs.lists(hs.sampled_from(["a0", "a1", "zz"]), max_size=9),
    streams=hs.integers(-1, 100),
)
def test_any_prepare_is_answered_never_raised(
    collective, algorithm, n, size, chunks, placement, streams
) -> None:
    import msgspec

    core = AgentCore("a0", FakeDataPlane(), FakeClock(), lambda _e: None)
    claim(core)
    spec = msgspec.msgpack.encode(
        {
            "collective": collective,
            "algorithm": algorithm,
            "n_ranks": n,
            "size": size,
            "chunks": chunks,
        }
    )
    msg = p.Prepare(
        job="j",
        epoch=1,
        programs=[spec],
        placement=placement,
        endpoints={"a0": "127.0.0.1:1", "a1": "127.0.0.1:2"},
        options=p.DataOptions(streams=streams),
    )
    out = send(core, msg)  # must return (refusal or nothing), never raise
    assert all(isinstance(m, p.Error) and m.code != "internal" for m in out), out
    assert (core.state is State.PREPARING) == (out == [])


def test_go_far_in_the_future_is_refused(agent) -> None:
    core, dp, clock = agent
    to_prepared(core)
    (err,) = send(core, p.Go(job="job1", epoch=1, start_at=clock.now() + 3600 * 10**9))
    assert err.code == "limit" and core.state is State.PREPARED and not dp.gos


def test_prepare_with_too_many_steps_is_refused_before_building() -> None:
    import msgspec

    core = AgentCore("a0", FakeDataPlane(), FakeClock(), lambda _e: None)
    claim(core)
    spec = {"collective": "all_reduce", "algorithm": "ring", "n_ranks": 9, "size": 1 << 20}
    msg = p.Prepare(
        job="j",
        epoch=1,
        programs=[msgspec.msgpack.encode({**spec, "chunks": 32768})],  # ~1.6M steps a rank
        placement=["a0"] * 9,
        endpoints={"a0": "127.0.0.1:1"},
    )
    (err,) = send(core, msg)
    assert isinstance(err, p.Error) and err.code == "limit"
    assert "steps per rank" in err.message and core.state is not State.PREPARED


def test_stale_abort_is_answered_with_the_job_it_names() -> None:
    core = AgentCore("a0", FakeDataPlane(), FakeClock(), lambda _e: None)
    claim(core)
    (err,) = send(core, p.Abort(job="gone-j3", epoch=3, reason="run failed"))
    assert isinstance(err, p.Error) and err.code == "stale"
    assert (err.job, err.epoch) == ("gone-j3", 3)  # so the controller files it under that job


# ---- issue 18: ownership, identity, bounded work -------------------------------------------
def test_naming_the_holder_proves_nothing_the_secret_does(agent) -> None:
    core, dp, _ = agent
    to_prepared(core)
    secret = SESSIONS[id(core)]
    (err,) = send(core, p.Hello(controller="ctl-1", version="0.1.0"), sender="intruder")
    assert err.code == "busy" and core.peer == "" and core.state is State.PREPARED
    # the holder's own peer without the secret (or with a wrong one) is refused too
    for bad in ("", "0" * 32):
        (err,) = core.handle(p.encode(p.Go(job="job1", epoch=1, session=bad)), "")
        assert err.code == "busy" and secret not in err.message
    assert not dp.gos and all(secret not in line for line in core.drain_log())


def test_a_holder_that_closed_goes_at_its_first_missed_beat(agent) -> None:
    core, dp, clock = agent
    to_prepared(core)
    core.holder_disconnected()
    assert core.next_deadline() <= core.last_heard + INTERVAL_NS
    assert core.tick() == [] and core.controller == "ctl-1"  # no beat missed yet
    clock.advance(INTERVAL_NS)
    core.tick()
    assert core.controller is None and core.state is State.IDLE and dp.releases == 1
    (reply,) = send(core, p.Hello(controller="ctl-2", version="0.1.0"), sender="other")
    assert isinstance(reply, p.HelloReply) and reply.session != SESSIONS[id(core)]


def test_a_silent_holder_is_displaced_after_two_beats_not_three(agent) -> None:
    core, _, clock = agent
    to_prepared(core)
    clock.advance(INTERVAL_NS + INTERVAL_NS // 2)
    (err,) = send(core, p.Hello(controller="ctl-2", version="0.1.0"), sender="other")
    assert err.code == "busy"
    clock.advance(INTERVAL_NS)
    (reply,) = send(core, p.Hello(controller="ctl-2", version="0.1.0"), sender="other")
    assert isinstance(reply, p.HelloReply) and core.controller == "ctl-2"


def test_an_agent_of_a_testbed_refuses_other_testbeds() -> None:
    core = AgentCore("a0", FakeDataPlane(), FakeClock(), lambda _e: None, testbed="genie-t1-x")
    (err,) = core.handle(p.encode(p.Hello(controller="c", version="v", testbed="genie-t2-x")))
    assert err.code == "testbed" and core.controller is None
    (ok,) = core.handle(p.encode(p.Hello(controller="c", version="v", testbed="genie-t1-x")))
    assert isinstance(ok, p.HelloReply)


def test_an_idle_unclaimed_agent_has_nothing_due(agent) -> None:
    core, _, _ = agent
    assert core.next_deadline() is None  # the shell sleeps (it polled every 1 ms)
    claim(core)
    assert core.next_deadline() is not None


def test_the_log_is_bounded_whatever_peers_send(agent) -> None:
    from genie_agent.state import LOG_KEEP

    core, _, _ = agent
    for _ in range(LOG_KEEP * 5):
        core.handle(b"\xc1")
    lines = core.drain_log()
    assert len(lines) == LOG_KEEP + 1 and "dropped" in lines[-1]
    assert core.drain_log() == []


def test_programs_are_built_by_the_builder_and_reported_by_event() -> None:
    jobs: list = []
    events: list[Event] = []
    dp = FakeDataPlane()
    core = AgentCore("a0", dp, FakeClock(), events.append, builder=jobs.append)
    claim(core)
    assert send(core, prepare_msg()) == [] and core.state is State.PREPARING
    assert not dp.prepared and len(jobs) == 1  # nothing built on the control thread
    (second,) = send(core, prepare_msg(epoch=2, job="job2"))
    assert second.code == "state"
    jobs.pop()()  # the worker runs
    (ev,) = events
    assert ev.kind == "built" and core.on_event(ev) == [] and dp.prepared
    assert core.builds == 0


def test_a_bad_program_built_off_thread_is_refused_and_dropped() -> None:
    jobs: list = []
    events: list[Event] = []
    core = AgentCore("a0", FakeDataPlane(), FakeClock(), events.append, builder=jobs.append)
    claim(core)
    bad = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=3, size=8)  # odd ranks
    msg = prepare_msg(programs=[msgspec_spec(bad)])
    msg.placement = ["a0", "a1", "a1"]
    assert send(core, msg) == []
    jobs.pop()()
    (err,) = core.on_event(events.pop())
    assert err.code == "program" and "even" in err.message and core.state is State.IDLE
