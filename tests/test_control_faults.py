"""Faults by type: every refusal or loss names its agent and cause as fields, and its type
depends on the cause alone (the one table in ``genie.controller.faults``), never on timing."""

from __future__ import annotations

import pytest

from genie.collectives.program import Program, ProgramSpec
from genie.controller import Controller, InProcChannel
from genie.controller import faults as f
from genie.errors import (
    AgentBusy,
    AgentFault,
    AgentLost,
    AgentRefused,
    AgentUnreachable,
    ControlUnreachable,
    DataPlaneError,
    FrameTooLarge,
    RuntimeFault,
    RunTimeout,
)
from genie.wire import messages as p
from genie.wire.clock import FakeClock
from genie.wire.frames import MAX_FRAME_BYTES
from genie_agent.programs import BUILTIN
from genie_agent.state import AgentCore, Event

NAMES = ("a0", "a1")


class _Plane:
    """A data plane that prepares at once (the tests here stop at prepare)."""

    def __init__(self) -> None:
        self.pending: list[Event] = []

    def endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", 9000

    def prepare(self, plan, prep, post) -> None:
        done = p.Prepared(
            job=prep.job, epoch=prep.epoch, ranks=plan.ranks, connections=0, setup_s=0
        )
        self.pending.append(Event("prepared", prep.job, prep.epoch, done))

    def go(self, go, start, post) -> None:  # pragma: no cover - never started here
        raise AssertionError("no runs in these tests")

    def release(self) -> None:
        pass


def _rig(refuse_on_hello: set[str] | None = None):
    """Controller and in-process agents; agents in ``refuse_on_hello`` refuse the handshake as
    the Hello arrives (the refusal comes after the send, as when libzmq reports it late)."""
    clock = FakeClock()
    planes = {n: _Plane() for n in NAMES}
    cores = {n: AgentCore(n, planes[n], clock, planes[n].pending.append) for n in NAMES}
    tr: InProcChannel

    def handler(name):
        def answer(frame: bytes) -> list[bytes]:
            if name in (refuse_on_hello or set()):
                tr.refused[name] = "authentication handshake refused (ZAP status 400)"
                return []
            return [p.encode(m) for m in cores[name].handle(frame)]

        return answer

    def pump():
        out = []
        for name, core in cores.items():
            while planes[name].pending:
                out += [(name, p.encode(m)) for m in core.on_event(planes[name].pending.pop(0))]
            out += [(name, p.encode(m)) for m in core.tick()]
        return out

    tr = InProcChannel({n: handler(n) for n in NAMES}, pump, lambda s: clock.advance(int(s * 1e9)))
    return Controller(tr, list(NAMES), clock, controller_id="ctl-test"), tr, cores


def test_every_cause_has_one_type_and_unknown_causes_are_agent_faults() -> None:
    expect = {
        "busy": AgentBusy,
        "testbed": AgentRefused,
        "run": DataPlaneError,
        f.HANDSHAKE_REFUSED: AgentRefused,
        f.NOT_CONNECTED: ControlUnreachable,
        f.SOCKET_FAILED: ControlUnreachable,
        f.TIMED_OUT: RunTimeout,
        f.NO_HELLO: AgentUnreachable,
        f.MISSED_BEATS: AgentLost,
        f.SILENT_TO_PROBE: AgentLost,
        f.DATA_UNREACHABLE: RunTimeout,
        "prepare": AgentFault,
        "no-such-cause": AgentFault,
    }
    for cause, kind in expect.items():
        exc = f.fault(cause, "text", "h1", "h2")
        assert type(exc) is kind, cause
        assert isinstance(exc, RuntimeFault) and exc.exit_code == 1
        assert (exc.cause, exc.agent, exc.agents, str(exc)) == (cause, "h1", ("h1", "h2"), "text")


def test_a_refusal_before_the_hello_and_one_after_it_are_the_same_error() -> None:
    # before: the channel knows the refusal when the Hello is sent (the send fails)
    ctl, tr, _ = _rig()
    tr.refused["a1"] = "authentication handshake refused (ZAP status 400)"
    with pytest.raises(AgentRefused) as before:
        ctl.connect()
    # after: the Hello went out, the refusal shows while the controller waits for replies
    ctl2, _, _ = _rig(refuse_on_hello={"a1"})
    with pytest.raises(AgentRefused) as after:
        ctl2.connect()
    for info in (before, after):
        exc = info.value
        assert (exc.agent, exc.cause) == ("a1", f.HANDSHAKE_REFUSED)
    assert (
        str(before.value)
        == str(after.value)
        == (
            "agent a1 refused this controller during hello: authentication handshake refused "
            "(ZAP status 400) (the agent does not trust this controller's key, or keys differ)"
        )
    )


def test_an_unreachable_agent_is_named_by_the_fault_not_by_its_text() -> None:
    ctl, tr, _ = _rig()
    del tr.handlers["a1"]  # nothing to send to
    with pytest.raises(ControlUnreachable) as info:
        ctl.connect()
    exc = info.value
    assert (exc.agent, exc.cause) == ("a1", f.NOT_CONNECTED)
    assert str(exc) == "cannot send to agent a1: unknown; agent a1 is not on this channel"


def test_a_silent_agent_is_unreachable_with_what_its_channel_says() -> None:
    ctl, tr, _ = _rig()
    ctl.to.register_s = 0.5
    tr.drop.add("a0")
    with pytest.raises(AgentUnreachable) as info:
        ctl.connect()
    exc = info.value
    assert (exc.agents, exc.cause) == (("a0",), f.NO_HELLO)
    assert "a0: agent a0 is cut off (its frames are dropped)" in str(exc)


def test_an_agent_error_names_its_agent_and_code() -> None:
    ctl, _, cores = _rig()
    ctl.connect()
    cores["a0"].session = "someone-else"  # a0 now holds another controller's secret: busy
    spec = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=2, size=64, chunks=1)
    with pytest.raises(AgentBusy) as info:
        ctl.prepare([Program(spec, BUILTIN[("selftest", "ring")])], list(NAMES))
    assert (info.value.agent, info.value.cause) == ("a0", "busy")


def test_a_prepare_too_large_for_the_wire_is_refused_before_it_is_sent() -> None:
    ctl, tr, _ = _rig()
    ctl.connect()
    n = 1024  # an all-to-all-v's n x n sizes: 5 MiB at 1,024 ranks; four of them are too many
    splits = tuple((1 << 24) + i for i in range(n * n))
    spec = ProgramSpec(
        collective="all_to_all", algorithm="direct", n_ranks=n, size=1, splits=splits
    )
    progs = [Program(spec, BUILTIN[("selftest", "ring")])] * 4
    sent = len(tr.sent)
    with pytest.raises(FrameTooLarge, match="do not fit in one Prepare") as info:
        ctl.prepare(progs, ["a0", "a1"] * (n // 2))
    assert info.value.size > MAX_FRAME_BYTES == info.value.limit
    assert not any(p.decode(fr).__class__ is p.Prepare for _, fr in tr.sent[sent:])
    assert ctl.job == ""  # nothing half-prepared is left behind
