"""The agent's control logic as a pure state machine: idle -> preparing -> prepared -> running.

``AgentCore`` takes decoded control frames and data-plane events and returns the messages to
send; it owns no socket and reads time only from an injected clock, so tests drive it without
sleeping. The data plane (``DataPlane``) does the slow work (connecting, running) elsewhere and
reports back with ``Event``s, which the shell feeds to ``on_event`` on the control thread.

Rules: a frame that does not decode is answered with ``Error(malformed)``; a job message whose
job/epoch is not the current one with ``Error(stale)``; a message not valid in the current state
with ``Error(state)``. None of these change anything. A controller silent for
``MISSED_BEATS_LIMIT`` heartbeat intervals while a job is held is considered lost: the job is
released and the agent returns to idle, free for the next controller.

Every answer to a Hello (its HelloReply, or the refusal) carries the Hello's job and epoch, so a
controller that asks again matches answers to the round that asked.

Ownership: a Hello that claims the agent gets a fresh random session secret in its HelloReply;
every later message must come from the same peer with that secret, or it is refused as
``busy`` (naming the holder's id, never the secret). Naming the holder's controller id proves
nothing. Another controller's Hello displaces the holder only on evidence that it is gone: its
connection closed and it missed a beat, or it was silent for ``TAKEOVER_BEATS`` intervals. An
agent started for a testbed (``testbed``) refuses Hellos naming any other one.

Bounded work: a Prepare's cost (data-plane options, steps to build: ``genie_agent.limits``) is
checked on the control thread; the programs are then built by ``builder`` (the daemon's worker
thread) so heartbeats never stop, at most ``BUILDS_MAX`` at a time. Refusals and losses go to a
bounded log the shell drains (``drain_log``).
"""

from __future__ import annotations

import enum
import hmac
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from genie import __version__
from genie.errors import GenieError, ProtocolError
from genie.wire.clock import Clock
from genie.wire.liveness import HEARTBEAT_INTERVAL_S, MISSED_BEATS_LIMIT
from genie.wire.messages import (
    PROTOCOL_VERSION,
    Abort,
    Ack,
    Bye,
    DataProbe,
    DataProbeReply,
    Error,
    Go,
    Heartbeat,
    Hello,
    HelloReply,
    HostFacts,
    Limits,
    Msg,
    Prepare,
    Prepared,
    Quit,
    Release,
    Result,
    TimeProbe,
    TimeReply,
    decode,
)
from genie_agent.limits import check_build_cost, check_options
from genie_agent.plan import AgentPlan, plan_agent
from genie_agent.programs import rebuild


class State(enum.Enum):
    """Where the agent is in a job's life."""

    IDLE = "idle"
    PREPARING = "preparing"
    PREPARED = "prepared"
    RUNNING = "running"


@dataclass(frozen=True)
class Event:
    """A worker's outcome: built, prepared, prepare_failed, result, run_failed or probe."""

    kind: str
    job: str
    epoch: int
    msg: Msg | None = None
    error: str = ""
    code: str = ""  # Error code to answer with (built/prepare_failed; default "prepare")
    plan: Any = None  # the AgentPlan of a "built" event


Builder = Callable[[Callable[[], None]], None]
"""builder(work): run ``work`` off the control thread (None: run it inline)."""


class DataPlane(Protocol):
    """What the state machine asks of a data plane (TCP, RDMA, or a fake in tests)."""

    def endpoint(self) -> tuple[str, int]:
        """(address, port) of this agent's data listener."""
        ...

    def prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        """Start setting up ``plan`` in the background; post prepared/prepare_failed."""
        ...

    def go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        """Start running in the background; post result/run_failed."""
        ...

    def release(self) -> None:
        """Stop anything running, close the job's connections and free its buffers (blocking)."""
        ...


Prober = Callable[[dict[str, str], float, Callable[[dict[str, str]], None]], None]
"""prober(peer -> "IP:PORT", timeout_s, done): connect to each in the background, then call
done(peer -> "" or the reason it failed)."""

PROBE_TIMEOUT_MAX_S = 10.0
TAKEOVER_BEATS = 2  # a holder silent this many intervals may be displaced by another Hello
BUILDS_MAX = 2  # program builds in flight (a stale one finishes in the background)
LOG_KEEP = 1000  # log lines kept until the shell drains them (older ones are counted, dropped)


class AgentCore:
    """Pure control logic of one agent."""

    def __init__(
        self,
        agent_id: str,
        data_plane: DataPlane,
        clock: Clock,
        post: Callable[[Event], None],
        facts: HostFacts | None = None,
        limits: Limits | None = None,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        missed_beats_limit: int = MISSED_BEATS_LIMIT,
        prober: Prober | None = None,
        testbed: str = "",
        builder: Builder | None = None,
    ) -> None:
        if not heartbeat_interval_s > 0:
            raise ValueError(f"heartbeat interval must be > 0, got {heartbeat_interval_s}")
        self.agent_id = agent_id
        self.dp = data_plane
        self.clock = clock
        self.post = post
        self.facts = facts or HostFacts()
        self.limits = limits or Limits()
        self.interval_ns = int(heartbeat_interval_s * 1e9)
        self.missed_limit = missed_beats_limit
        self.state = State.IDLE
        self.controller: str | None = None
        self.job = ""
        self.epoch = 0
        self.last_epoch = 0
        self.plan: AgentPlan | None = None
        self.last_heard = clock.now()
        self.next_beat = self.last_heard + self.interval_ns
        self.beats = 0
        self.quit = False
        self._silent = 0
        self._sender = ""
        self._owner = False
        self.peer = ""  # transport id of the holding controller: events and beats go there
        self.session = ""  # the holder's secret (never logged, never in an error)
        self.holder_gone = False  # the holder's connection closed (evidence it is dead)
        self.testbed = testbed
        self.builder = builder
        self.builds = 0  # builds in flight
        self._prep: Prepare | None = None  # the Prepare whose programs are being built
        self._log: deque[str] = deque(maxlen=LOG_KEEP)
        self.log_dropped = 0
        self.prober = prober
        self.peer_endpoints: dict[str, str] = {}  # data endpoints of the last job's peers

    # ---- helpers -------------------------------------------------------------------------
    def note(self, line: str) -> None:
        """Queue a log line for the shell (bounded: the oldest are dropped and counted)."""
        if len(self._log) == self._log.maxlen:
            self.log_dropped += 1
        self._log.append(line)

    def drain_log(self) -> list[str]:
        """The log lines queued since the last call (and a count of any dropped)."""
        out = list(self._log)
        self._log.clear()
        if self.log_dropped:
            out.append(f"log: {self.log_dropped} lines dropped (too many at once)")
            self.log_dropped = 0
        return out

    def _err(self, code: str, message: str, about: Msg | None = None) -> Error:
        self.note(f"{code}: {message}")
        return Error(
            job=self.job,
            epoch=self.epoch,
            code=code,
            message=message,
            about=type(about).__name__ if about is not None else "",
        )

    def refuse(self, code: str, message: str) -> list[Msg]:
        """The answer to a frame refused before decoding (``code`` one of ERROR_CODES)."""
        return [self._err(code, message)]

    def _current(self, msg: Msg) -> bool:
        return bool(self.job) and msg.job == self.job and msg.epoch == self.epoch

    def _drop_job(self, why: str = "") -> None:
        if self.state is not State.IDLE:
            self.dp.release()
            self.note(f"idle: job {self.job} released ({why or 'dropped'})")
        self.state = State.IDLE
        self.plan = None
        self._prep = None
        self.job = ""

    def _unclaim(self) -> None:
        self.controller = None
        self.peer = ""
        self.session = ""
        self.holder_gone = False

    def _proves(self, msg: Msg, sender: str) -> bool:
        """True if ``msg`` comes from the holder: its peer, with its session secret."""
        return (
            self.controller is not None
            and sender == self.peer
            and bool(self.session)
            and hmac.compare_digest(msg.session.encode(), self.session.encode())
        )

    def _busy(self, msg: Msg) -> Error:
        """The refusal of ``msg`` from a non-holder: stamped with ``msg``'s own job and epoch
        (never the holder's, which a stranger has no business learning)."""
        err = self._err("busy", f"agent is held by controller {self.controller}", msg)
        return msgspec.structs.replace(err, job=msg.job, epoch=msg.epoch)

    def holder_disconnected(self) -> None:
        """The holder's control connection closed: it goes at its first missed beat."""
        if self.controller is not None:
            self.holder_gone = True

    def missed_beats(self) -> int:
        """Whole heartbeat intervals since the controller was last heard."""
        return max(0, (self.clock.now() - self.last_heard) // self.interval_ns)

    # ---- inputs --------------------------------------------------------------------------
    def handle(self, frame: bytes, sender: str = "") -> list[Msg]:
        """Handle one control frame from peer ``sender``; return the replies (to ``sender``).

        Only the controller that holds the agent (its peer, with its session secret) may drive
        it; from anyone else a job message is refused with ``Error(busy)`` naming the holder.
        """
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            return [self._err("malformed", str(exc))]
        self._silent = self.missed_beats()
        owner = self._proves(msg, sender)
        if not isinstance(msg, Hello | TimeProbe | Quit) and self.controller and not owner:
            return [self._busy(msg)]
        if owner:
            self.last_heard = self.clock.now()
            self.holder_gone = False
        self._sender = sender
        self._owner = owner
        try:
            out = self._dispatch(msg)
        except GenieError as exc:  # bad program, over limits...: refuse, change nothing
            code = "limit" if isinstance(exc, ProtocolError) else "program"
            out = [self._err(code, str(exc), msg)]
        except Exception as exc:  # a bug must not kill the agent: refuse and report it
            out = [self._err("internal", f"{type(exc).__name__}: {exc}", msg)]
        if isinstance(msg, Prepare | Hello):
            # a refused Prepare is news about the job it names; every answer to a Hello carries
            # its epoch, so the controller matches it to the round that asked
            out = [
                msgspec.structs.replace(m, job=msg.job, epoch=msg.epoch)
                if isinstance(m, Error | HelloReply)
                else m
                for m in out
            ]
        return out

    def _dispatch(self, msg: Msg) -> list[Msg]:
        if isinstance(msg, Hello):
            return self._on_hello(msg)
        if isinstance(msg, Heartbeat):
            return []
        if isinstance(msg, TimeProbe):
            t1 = self.clock.now()
            return [TimeReply(job=msg.job, epoch=msg.epoch, t0=msg.t0, t1=t1, t2=self.clock.now())]
        if isinstance(msg, Prepare):
            return self._on_prepare(msg)
        if isinstance(msg, Go):
            return self._on_go(msg)
        if isinstance(msg, Abort | Release):
            return self._on_abort(msg)
        if isinstance(msg, DataProbe):
            return self._on_probe(msg)
        if isinstance(msg, Bye):
            self._drop_job("controller said bye")
            self._unclaim()
            return [Ack(job=msg.job, epoch=msg.epoch, what="bye")]
        if isinstance(msg, Quit):
            if self.controller and not self._owner and not self._holder_lost():
                return [self._busy(msg)]
            self._drop_job("quit")
            self.quit = True
            return [Ack(what="quit")]
        return [self._err("direction", f"{type(msg).__name__} is not sent to agents", msg)]

    def _holder_lost(self) -> bool:
        """Evidence the holder is gone: closed and a beat missed, or silent for long."""
        return (self.holder_gone and self._silent >= 1) or self._silent >= TAKEOVER_BEATS

    def _on_hello(self, msg: Hello) -> list[Msg]:
        if msg.protocol != PROTOCOL_VERSION:
            return [
                self._err(
                    "version",
                    f"controller speaks protocol {msg.protocol}, agent {PROTOCOL_VERSION}",
                    msg,
                )
            ]
        if self.testbed and msg.testbed != self.testbed:
            theirs = repr(msg.testbed) if msg.testbed else "none"
            return [
                self._err(
                    "testbed",
                    f"agent {self.agent_id} serves testbed {self.testbed!r}; this controller's "
                    f"testbed is {theirs}",
                    msg,
                )
            ]
        if self.controller is not None and not self._owner:
            if not self._holder_lost():
                return [self._busy(msg)]
            why = "disconnected" if self.holder_gone else f"silent {self._silent} beats"
            self.note(f"takeover: controller {self.controller} {why}, {msg.controller} claims")
            self._drop_job("takeover")
            self._unclaim()
        if not self._owner:  # a new claim: a new secret, a new epoch count
            self.session = os.urandom(16).hex()
            self.last_epoch = 0
        self.controller = msg.controller
        self.peer = self._sender
        self.holder_gone = False
        self.last_heard = self.clock.now()
        addr, port = self.dp.endpoint()
        return [
            HelloReply(
                agent=self.agent_id,
                version=__version__,
                protocol=PROTOCOL_VERSION,
                facts=self.facts,
                data_addr=addr,
                data_port=port,
                pid=os.getpid(),
                session=self.session,
            )
        ]

    def _on_prepare(self, msg: Prepare) -> list[Msg]:
        if self.controller is None:
            return [self._err("state", "prepare before hello", msg)]
        if msg.epoch <= self.last_epoch or not msg.job:
            return [self._err("stale", f"epoch {msg.epoch} is not after {self.last_epoch}", msg)]
        if self.state is not State.IDLE:
            return [self._err("state", f"prepare while {self.state.value}", msg)]
        check_options(msg.options, self.limits)
        if len(msg.programs) > self.limits.max_programs:
            raise ProtocolError(f"{len(msg.programs)} programs; limit {self.limits.max_programs}")
        chans = len(msg.options.program_channels)
        if chans not in (0, len(msg.programs)):
            raise ProtocolError(f"{chans} program channels for {len(msg.programs)} programs")
        programs = [rebuild(b) for b in msg.programs]
        check_build_cost(self.agent_id, programs, msg.placement, self.limits)
        missing = {a for a in msg.placement if a not in msg.endpoints}
        if missing:
            raise ProtocolError(f"no data endpoint for {sorted(missing)}")
        if self.builder is None:  # inline (tests): a bad program is refused with no change
            plan = plan_agent(self.agent_id, programs, msg.placement, self.limits)
        elif self.builds >= BUILDS_MAX:
            return [self._err("limit", "still building an earlier job's programs", msg)]
        self.job, self.epoch, self.last_epoch = msg.job, msg.epoch, msg.epoch
        self.peer_endpoints = {
            a: msg.endpoints[a] for a in sorted(set(msg.placement)) if a != self.agent_id
        }
        self.state = State.PREPARING
        self._prep = msg
        if self.builder is None:
            self.plan = plan
            self.dp.prepare(plan, msg, self.post)
            return []
        self.builds += 1
        job, epoch, agent, limits, post = msg.job, msg.epoch, self.agent_id, self.limits, self.post

        def build() -> None:  # off the control thread; reports back with one event
            try:
                built = plan_agent(agent, programs, msg.placement, limits)
            except GenieError as exc:
                code = "limit" if isinstance(exc, ProtocolError) else "program"
                post(Event("built", job, epoch, error=str(exc), code=code))
            except Exception as exc:  # a bug must not lose the answer
                why = f"{type(exc).__name__}: {exc}"
                post(Event("built", job, epoch, error=why, code="internal"))
            else:
                post(Event("built", job, epoch, plan=built))

        self.builder(build)
        return []

    def _on_go(self, msg: Go) -> list[Msg]:
        if not self._current(msg):
            return [self._err("stale", f"go for {msg.job}/{msg.epoch}, not the current job", msg)]
        if self.state is not State.PREPARED or self.plan is None:
            return [self._err("state", f"go while {self.state.value}", msg)]
        if not 0 <= msg.program < len(self.plan.programs):
            return [self._err("limit", f"no program {msg.program}", msg)]
        if not (
            msg.iters >= 1 and msg.warmup >= 0 and msg.iters + msg.warmup <= self.limits.max_iters
        ):
            return [self._err("limit", f"bad iteration counts {msg.iters}+{msg.warmup}", msg)]
        start = msg.start_at + msg.offset
        if start - self.clock.now() > self.limits.max_start_delay_s * 1e9:
            return [self._err("limit", "start time too far in the future", msg)]
        if not 0 < msg.timeout_s <= 86_400 or not 0 <= msg.spin_ns <= 10**9:
            return [self._err("limit", "timeout or spin out of bounds", msg)]
        self.state = State.RUNNING
        self.dp.go(msg, start, self.post)
        return []

    def _on_abort(self, msg: Abort | Release) -> list[Msg]:
        what = "abort" if isinstance(msg, Abort) else "release"
        if not self._current(msg):
            err = self._err("stale", f"{what} for {msg.job}/{msg.epoch}, not the current job", msg)
            # stamped with the job it answers (often one this agent already dropped itself after
            # a failed run), so the controller can tell it from news about its current job
            return [msgspec.structs.replace(err, job=msg.job, epoch=msg.epoch)]
        if isinstance(msg, Release) and self.state is State.RUNNING:
            return [self._err("state", "release while running (use abort)", msg)]
        job, epoch = self.job, self.epoch
        self._drop_job(what if isinstance(msg, Release) else f"abort: {msg.reason}")
        return [Ack(job=job, epoch=epoch, what=what)]

    def _on_probe(self, msg: DataProbe) -> list[Msg]:
        if self.prober is None:
            return [self._err("state", "this agent cannot probe its data network", msg)]
        if not 0 < msg.timeout_s <= PROBE_TIMEOUT_MAX_S:
            return [self._err("limit", f"probe timeout {msg.timeout_s} s out of bounds", msg)]
        job, epoch = msg.job, msg.epoch

        def done(peers: dict[str, str]) -> None:
            reply = DataProbeReply(job=job, epoch=epoch, peers=peers)
            self.post(Event("probe", job, epoch, reply))

        self.prober(dict(self.peer_endpoints), msg.timeout_s, done)
        return []

    def on_event(self, ev: Event) -> list[Msg]:
        """Handle a worker's event; events of a job no longer current are dropped."""
        if ev.kind == "probe":  # answers a DataProbe, whatever job is current
            return [ev.msg] if ev.msg else []
        if ev.kind == "built":
            self.builds = max(0, self.builds - 1)
        if ev.job != self.job or ev.epoch != self.epoch:
            return []
        if ev.kind == "built" and self.state is State.PREPARING and self._prep is not None:
            if ev.plan is None:
                err = self._err(ev.code or "program", ev.error, self._prep)
                self._drop_job("program refused")
                return [err]
            self.plan = ev.plan
            self.dp.prepare(ev.plan, self._prep, self.post)
            return []
        if ev.kind == "prepared" and self.state is State.PREPARING:
            self.state = State.PREPARED
            return [ev.msg] if ev.msg else []
        if ev.kind == "result" and self.state is State.RUNNING:
            self.state = State.PREPARED
            return [ev.msg] if ev.msg else []
        if ev.kind in ("prepare_failed", "run_failed"):
            code = ev.code or ("prepare" if ev.kind == "prepare_failed" else "run")
            err = self._err(code, ev.error)
            self._drop_job(f"{code} failed")
            return [err]
        return []

    def tick(self) -> list[Msg]:
        """Time passes: beat if due; release the job if the controller is lost."""
        out: list[Msg] = []
        now = self.clock.now()
        if self.holder_gone and self.missed_beats() >= 1:  # closed, and a beat missed: gone
            self.note(f"lost: controller {self.controller} disconnected; agent released")
            self._drop_job("controller disconnected")
            self._unclaim()
            return out
        if self.state is not State.IDLE and self.missed_beats() >= self.missed_limit:
            # the job dies with its controller; the agent stays claimed but, being silent, that
            # controller is displaced by the next Hello from another one
            out.append(
                self._err(
                    "run",
                    f"controller {self.controller} lost after {self.missed_beats()} beats",
                )
            )
            self.note(f"lost: controller {self.controller}; job {self.job} released")
            self._drop_job("controller lost")
        if self.controller is not None and now >= self.next_beat:
            self.beats += 1
            out.append(
                Heartbeat(job=self.job, epoch=self.epoch, seq=self.beats, sender=self.agent_id)
            )
            self.next_beat = now + self.interval_ns
        return out

    def next_deadline(self) -> int | None:
        """When ``tick`` next has something to do (ns); None: nothing until a frame comes."""
        if self.controller is None:
            return None  # unclaimed and idle: no beats to send, nothing to time out
        due = self.next_beat
        if self.holder_gone:
            due = min(due, self.last_heard + self.interval_ns)
        if self.state is not State.IDLE:
            due = min(due, self.last_heard + self.missed_limit * self.interval_ns)
        return due


__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "MISSED_BEATS_LIMIT",
    "AgentCore",
    "DataPlane",
    "Event",
    "Prepared",
    "Result",
    "State",
]
