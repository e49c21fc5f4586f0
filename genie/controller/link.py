"""The controller's link to its agents: send, receive, heartbeats, and waits that judge loss.

``AgentLink`` holds what every exchange with the agents shares (the channel, the clock, each
agent's session secret and when it was last heard, the current job and epoch) and the one rule
of liveness: ``_wait`` collects one answer per agent, bounded by a deadline and by the
heartbeat rule (an agent silent for ``missed_limit`` intervals is lost, judged just after a
zero-length poll has read every frame queued meanwhile; time this controller itself was not
running is credited back, so it is no agent's silence). An agent whose connection drops is
judged by its ``Postmortem`` at once. ``genie.controller.session.Controller`` runs the job's
phases on top of it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence

import msgspec

from genie.controller.channel import Channel
from genie.controller.faults import (
    AGENT_DIED,
    CONNECTION_DROPPED,
    HANDSHAKE_REFUSED,
    MISSED_BEATS,
    NOT_CONNECTED,
    SILENT_TO_PROBE,
    TIMED_OUT,
    fault,
)
from genie.controller.postmortem import Postmortem
from genie.errors import AgentFault, ControlUnreachable, GenieError, ProtocolError, RuntimeFault
from genie.wire.clock import Clock
from genie.wire.messages import (
    PROTOCOL_VERSION,
    Error,
    Heartbeat,
    HelloReply,
    Msg,
    TimeProbe,
    decode,
    encode,
)

log = logging.getLogger(__name__)


class AgentLink:
    """The channel to a set of agents, with heartbeats and loss-judging waits (see module)."""

    def __init__(
        self, transport: Channel, clock: Clock, controller_id: str, hb_ns: int, missed_limit: int
    ) -> None:
        self.t = transport
        self.clock = clock
        self.id = controller_id
        self.hb_ns = hb_ns
        self.missed_limit = missed_limit
        self.lost: set[str] = set()  # agents found dead or cut off (skipped by abort/close)
        self.hello: dict[str, HelloReply] = {}
        self.job = ""
        self.ended_jobs: set[str] = set()  # jobs this controller released or aborted
        self.epoch = 0
        self.last_heard: dict[str, int] = {}
        self._next_beat = 0
        self._beats = 0
        self.sessions: dict[str, str] = {}  # agent -> its secret (from its HelloReply)
        self._io = threading.RLock()  # the transport is used by the keepalive thread too
        self._keepalive: threading.Thread | None = None
        self._stop_keepalive = threading.Event()
        # how an agent whose connection dropped ended (set by ``open_controller``)
        self.postmortem: Postmortem | None = None
        self._dropped_at: dict[str, int] = {}  # agent -> when its dropped connection was seen

    def _send(self, agent: str, msg: Msg, about: str = "") -> None:
        """Send ``msg`` to ``agent``; a refused handshake is an AgentRefused however it shows.

        ``about``: what the send is part of, for the refusal's message (default: the message's
        type).
        """
        secret = self.sessions.get(agent)
        if secret:
            msg = msgspec.structs.replace(msg, session=secret)
        frame = encode(msg)
        with self._io:
            try:
                self.t.send(agent, frame)
            except ControlUnreachable as exc:
                if exc.cause == HANDSHAKE_REFUSED:
                    raise self._refusal(agent, about or type(msg).__name__.lower()) from None
                # (a beat is not judged here: the keepalive thread must not wait for a record)
                gone = exc.cause == NOT_CONNECTED and agent in self.hello
                if gone and not isinstance(msg, Heartbeat):
                    self._if_dead(agent, about or type(msg).__name__.lower())
                raise

    def _refusal(self, agent: str, about: str) -> AgentFault:
        """The error for ``agent`` having refused this controller's handshake."""
        why = self.t.refused.get(agent, "handshake refused")
        return fault(
            HANDSHAKE_REFUSED,
            f"agent {agent} refused this controller during {about}: {why} "
            "(the agent does not trust this controller's key, or keys differ)",
            agent,
        )

    def _recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        with self._io:
            return self.t.recv(timeout_s)

    def _beat(self, now: int) -> None:
        if now < self._next_beat:
            return
        self._beats += 1
        for a in list(self.hello):
            with contextlib.suppress(GenieError):  # an unreachable agent is judged by _wait
                self._send(
                    a, Heartbeat(job=self.job, epoch=self.epoch, seq=self._beats, sender=self.id)
                )
        self._next_beat = now + self.hb_ns

    def start_keepalive(self) -> None:
        """Beat from a background thread whenever no wait is beating (until ``close``)."""
        if self._keepalive is not None:
            return
        self._stop_keepalive.clear()

        def loop() -> None:
            while not self._stop_keepalive.wait(self.hb_ns / 4e9):
                if not self._io.acquire(blocking=False):
                    continue  # a wait holds the channel, and beats itself
                try:
                    self._beat(self.clock.now())
                except Exception as exc:  # never kill the thread: the next wait reports it
                    log.debug("keepalive: %s", exc)
                finally:
                    self._io.release()

        self._keepalive = threading.Thread(target=loop, name="genie-keepalive", daemon=True)
        self._keepalive.start()

    def stop_keepalive(self) -> None:
        """Stop the keepalive thread (bounded)."""
        t, self._keepalive = self._keepalive, None
        if t is not None:
            self._stop_keepalive.set()
            t.join(timeout=2)

    def _wait(
        self,
        want: type[Msg],
        agents: Sequence[str],
        timeout_s: float,
        about: str,
        match_job: bool = True,
        errors_ok: bool = False,
        hello_round: int = 0,
    ) -> dict[str, Msg]:
        """Collect one ``want`` from each agent; RuntimeFault on error, timeout or loss.

        ``errors_ok``: an Error from an agent counts as its answer (abort/bye: the agent already
        dropped the job). ``hello_round``: answers to the Hello of that epoch only (an agent
        stamps its answer to a Hello with the Hello's epoch; 0 is an agent that does not). An
        agent's run or prepare error during a job first checks every other agent's liveness, so
        a peer that died (whose loss made the others fail) is named.
        """
        got: dict[str, Msg] = {}
        pending = set(agents)
        start = self.clock.now()
        if not 0 <= timeout_s < 1e9:  # NaN and inf too: a bound that is no bound is a bug
            raise RuntimeFault(f"waiting for {about}: bad bound {timeout_s} s")
        deadline = start + int(timeout_s * 1e9)
        for a in agents:
            self.last_heard.setdefault(a, start)
        # silence is judged on every wake-up, but only just after a poll found the queue empty
        # (beats queued while this controller was busy or descheduled count)
        drained_at: int | None = None
        while pending:
            now = self.clock.now()
            refused = self.t.refused  # before the deadline: a refusal is a refusal, however late
            for a in sorted(pending):
                if a in refused:
                    raise self._refusal(a, about)
            if now >= deadline:
                raise fault(
                    TIMED_OUT,
                    f"timed out after {timeout_s:.3g} s waiting for {about} from "
                    f"{', '.join(sorted(pending))}",
                    *sorted(pending),
                )
            for a in sorted(pending):
                if a in self.hello and a in self.t.dropped:
                    self._judge_drop(a, about)
            suspects = self._silent(pending, now, start)
            fresh = drained_at is not None and now - drained_at <= self.hb_ns // 4
            for a, silent in suspects if fresh else ():
                self._if_dead(a, about)
                self.lost.add(a)
                raise fault(
                    MISSED_BEATS,
                    f"agent {a} lost: silent for {silent} heartbeat intervals during {about}",
                    a,
                )
            self._beat(now)
            # with suspects, read what is queued (a zero-length poll) before blaming anyone
            wait_ns = 0 if suspects else min(deadline - now, self.hb_ns, self._next_beat - now)
            item = self._recv(max(wait_ns, 0) / 1e9)
            if item is None:
                after = self.clock.now()
                self._credit_stall(after - now - max(wait_ns, 0))
                drained_at = after
                continue
            drained_at = None
            agent, frame = item
            self.last_heard[agent] = self.clock.now()
            try:
                msg = decode(frame)
            except ProtocolError as exc:
                log.warning("dropped malformed frame from %s: %s", agent, exc)
                continue
            if isinstance(msg, Heartbeat):
                continue
            if hello_round and msg.epoch not in (0, hello_round):
                log.debug(
                    "dropped %s of hello round %d from %s", type(msg).__name__, msg.epoch, agent
                )
                continue
            if isinstance(msg, HelloReply) and agent in pending and msg.session:
                self.sessions[agent] = msg.session  # even if the wait fails: Bye must prove it
            if isinstance(msg, Error):
                if msg.job and msg.job in self.ended_jobs:  # a late word on a job already over
                    log.info(
                        "ignored error of ended job %s from %s: %s", msg.job, agent, msg.message
                    )
                    continue
                if errors_ok and agent in pending:
                    got[agent] = msg
                    pending.discard(agent)
                    continue
                if not match_job or (msg.job, msg.epoch) == (self.job, self.epoch) or not msg.job:
                    detail = f"{msg.code}: {msg.message}"
                    if msg.code in ("run", "prepare") and self.job:
                        self._name_dead(agents, agent, about, detail)
                        self._name_lost(agents, agent, about, detail)
                    if msg.code == "malformed" and want is HelloReply:  # an older agent
                        detail += (
                            f" (this controller speaks protocol {PROTOCOL_VERSION}: update the "
                            "agent, e.g. `genie deploy`)"
                        )
                    raise fault(msg.code, f"agent {agent} during {about}: {detail}", agent)
                log.info("ignored stale error from %s: %s", agent, msg.message)
                continue
            if match_job and (msg.job, msg.epoch) != (self.job, self.epoch):
                log.debug("dropped stale %s from %s", type(msg).__name__, agent)
                continue
            if isinstance(msg, want) and agent in pending:
                got[agent] = msg
                pending.discard(agent)
            else:
                log.debug("dropped unexpected %s from %s", type(msg).__name__, agent)
        return got

    def _silent(self, pending: set[str], now: int, start: int) -> list[tuple[str, int]]:
        """(agent, whole beats silent) of the connected ``pending`` agents silent too long."""
        out = []
        for a in sorted(pending):
            silent = (now - self.last_heard.get(a, start)) // self.hb_ns
            if a in self.hello and silent >= self.missed_limit:
                out.append((a, silent))
        return out

    def _credit_stall(self, late_ns: int) -> None:
        """A wait that returned ``late_ns`` after its bound: this controller was not running
        (a loaded or stopped process), so that time is no agent's silence."""
        if late_ns <= self.hb_ns // 2:
            return
        log.info("controller stalled %.2f s: not counted as agents' silence", late_ns / 1e9)
        for a, t in self.last_heard.items():
            self.last_heard[a] = t + late_ns

    def _if_dead(self, agent: str, about: str, detail: str = "") -> bool | None:
        """Raise AgentLost saying how ``agent``'s process ended, if the postmortem knows it.

        Returns whether it still runs: False, or None where the postmortem cannot tell.
        """
        fate = self.postmortem.fate(agent) if self.postmortem is not None else None
        if fate is None or not fate.dead:
            return None if fate is None else fate.dead
        self.lost.add(agent)
        text = f"agent {agent} lost during {about}: {fate.text}"
        if detail:
            text += f" (agent {detail})"
        if fate.hint:
            text += f"; restart it: `{fate.hint}`"
        raise fault(AGENT_DIED, text, agent)

    def _judge_drop(self, agent: str, about: str) -> None:
        """``agent``'s connection dropped: lost if its process ended, or if its address refuses
        connections for a heartbeat interval (its process may have died); else wait on."""
        now = self.clock.now()
        since = self._dropped_at.setdefault(agent, now)
        if self._if_dead(agent, about) is False:
            return  # the process runs: the connection comes back, or its beats decide
        if self.t.dropped.get(agent, 0) < 1 or now - since < self.hb_ns:
            return
        self.lost.add(agent)
        raise fault(
            CONNECTION_DROPPED,
            f"agent {agent} lost during {about}: {self.t.describe(agent)} (for "
            f"{(now - since) / 1e9:.1f} s): the agent process may have died "
            f"(`genie agents status {agent} --testbed FILE`)",
            agent,
        )

    def _name_dead(self, agents: Sequence[str], reporter: str, about: str, detail: str) -> None:
        """After ``reporter`` failed a job step: raise naming an agent whose process ended."""
        for a in sorted(set(agents) - {reporter} - self.lost):
            if a in self.t.dropped:
                self._if_dead(a, about, f"{reporter} reported: {detail}")

    def _name_lost(self, agents: Sequence[str], reporter: str, about: str, detail: str) -> None:
        """After ``reporter`` failed a job step: raise naming any agent that no longer answers.

        Every other agent is probed (TimeProbe, answered at once by a live agent whoever holds
        it); one that stays silent for one heartbeat interval is lost (the job has failed
        already, so this only decides whom the error names). Returns if all answer.
        """
        others = {a for a in agents if a != reporter and a not in self.lost}
        if not others:
            return
        start = self.clock.now()
        for a in sorted(others):
            try:
                self._send(a, TimeProbe(t0=start))
            except GenieError:
                continue  # unreachable: stays silent
        window = self.hb_ns  # a live agent answers a probe in far less than one beat
        silent = set(others)
        while silent and self.clock.now() - start < window:
            item = self._recv(max(1, window - (self.clock.now() - start)) / 1e9)
            if item is not None:
                self.last_heard[item[0]] = self.clock.now()
                silent.discard(item[0])
        for a in sorted(silent):
            self._if_dead(a, about, f"{reporter} reported: {detail}")
        if silent:
            self.lost |= silent
            beats = (self.clock.now() - min(self.last_heard.get(a, start) for a in silent)) / (
                self.hb_ns
            )
            raise fault(
                SILENT_TO_PROBE,
                f"agent {', '.join(sorted(silent))} lost during {about}: no answer for "
                f"{beats:.1f} heartbeat intervals (agent {reporter} reported: {detail})"
                + "".join(
                    f"; {a}: {self.t.describe(a)}: the agent process may have died "
                    f"(`genie agents status {a} --testbed FILE`)"
                    for a in sorted(silent)
                    if self.t.dropped.get(a, 0) > 0
                ),
                *sorted(silent),
            )
