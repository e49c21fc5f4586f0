"""The TCP data plane: a listener for the agent's life, persistent connections per job.

Connections. Every agent has one data listener for its whole life. For a job, the lower global
rank of each pair that talks connects ``streams`` TCP connections to the higher rank's agent and
introduces each with a handshake (``agents.transports.tcp_wire``). The listener hands a
connection to the job whose token and expected pairs it matches; one that arrives before this
agent has seen the job's Prepare is parked briefly; anything else is closed. Connections are
reused by every iteration and every program of the job.

Each local rank then runs in its own thread (``agents.transports.tcp_exec``: one program for
warmup+iters iterations, or a whole op list, ``agents.transports.tcp_oplist``) over the frame
machinery of ``agents.transports.tcp_engine``. The wire formats, ``pattern_fill`` and the rank
executor are re-exported here under their old import paths.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from agents.oplist import check_ops
from agents.plan import AgentPlan
from agents.state import Event
from agents.transports.steps import pattern_fill
from agents.transports.steps import set_realtime as _set_realtime
from agents.transports.tcp_engine import POLL_S
from agents.transports.tcp_exec import RankExecutor
from agents.transports.tcp_wire import HANDSHAKE, HANDSHAKE_MAGIC, HDR, Stream, split_parts, tune
from genie.errors import GenieError, TransportError
from genie.wire.messages import DataOptions, Go, OpItem, Prepare, Prepared, RankResult, Result
from genie.wire.tokens import new_token, token_bytes

__all__ = [
    "HANDSHAKE",
    "HANDSHAKE_MAGIC",
    "HDR",
    "POLL_S",
    "RankExecutor",
    "Stream",
    "TcpDataPlane",
    "_set_realtime",
    "new_token",
    "pattern_fill",
    "split_parts",
    "token_bytes",
]

PARKED_MAX = 4096  # connections held for a job this agent has not seen yet
PARKED_AGE_S = 30.0
HANDSHAKE_TIMEOUT_S = 5.0
HANDSHAKES_MAX = 256  # connections allowed to be mid-handshake at once


class TcpDataPlane:
    """The agent's TCP data plane: a listener for its lifetime, connections and workers per job."""

    def __init__(self, data_addr: str, port: int = 0, log: Callable[[str], None] | None = None):
        family = socket.AF_INET6 if ":" in data_addr else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((data_addr, port))
        except OSError as exc:
            raise TransportError(f"cannot listen for data on {data_addr}:{port}: {exc}") from None
        self.listener.listen(512)
        self.addr = data_addr
        self.port = self.listener.getsockname()[1]
        self.log = log or (lambda _m: None)
        self._lock = threading.Condition()
        self._token = b""
        self._expected: set[tuple[int, int, int]] = set()
        self._got: dict[tuple[int, int, int], socket.socket] = {}
        self._parked: dict[tuple[bytes, int, int, int], tuple[float, socket.socket]] = {}
        self._closing = False
        self._handshaking = 0
        self._abort = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._execs: dict[int, RankExecutor] = {}
        self._plan: AgentPlan | None = None
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="genie-accept", daemon=True
        )
        self._acceptor.start()

    def endpoint(self) -> tuple[str, int]:
        """(address, port) of the data listener."""
        return self.addr, self.port

    # ---- accepting ------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                sock, peer = self.listener.accept()
            except OSError:
                if self._closing:
                    return
                time.sleep(0.01)
                continue
            with self._lock:
                crowded = self._handshaking >= HANDSHAKES_MAX
                if not crowded:
                    self._handshaking += 1
            if crowded:  # a flood of silent connections must not starve the job's own
                self.log(f"data: refused connection from {peer}: too many handshakes at once")
                sock.close()
                continue
            threading.Thread(
                target=self._handshake, args=(sock, peer), name="genie-handshake", daemon=True
            ).start()

    def _handshake(self, sock: socket.socket, peer) -> None:
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            raw = b""
            while len(raw) < HANDSHAKE.size:
                chunk = sock.recv(HANDSHAKE.size - len(raw))
                if not chunk:
                    raise OSError("closed during handshake")
                raw += chunk
            magic, token, src, dst, stream, _n = HANDSHAKE.unpack(raw)
            if magic != HANDSHAKE_MAGIC:
                raise OSError("bad handshake magic")
            sock.settimeout(None)
        except OSError as exc:
            self.log(f"data: refused connection from {peer}: {exc}")
            sock.close()
            return
        finally:
            with self._lock:
                self._handshaking -= 1
        self._offer(token, (src, dst, stream), sock, peer)

    def _offer(self, token: bytes, key: tuple[int, int, int], sock: socket.socket, peer) -> None:
        with self._lock:
            if token == self._token and key in self._expected and key not in self._got:
                self._got[key] = sock
                self._lock.notify_all()
                return
            current = bool(self._token)  # a job is set up here: no other job's peer may come
            if token != self._token and not current and len(self._parked) < PARKED_MAX:
                now = time.monotonic()
                for k, (t, old) in list(self._parked.items()):
                    if now - t > PARKED_AGE_S:
                        old.close()
                        del self._parked[k]
                self._parked[(token, *key)] = (now, sock)
                return
        why = "token of another job" if token != self._token else "not expected"
        self.log(f"data: refused connection from {peer} for rank pair {key[:2]}: {why}")
        sock.close()

    # ---- prepare --------------------------------------------------------------------------
    def prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        """Connect, accept and allocate in a background thread; post the outcome."""
        self._abort = threading.Event()
        opts = prep.options
        tok = token_bytes(opts.token)
        expected = {(a, b, k) for (a, b) in plan.incoming for k in range(opts.streams)}
        with self._lock:
            self._token, self._expected, self._got = tok, expected, {}
            for (ptok, *key), (_, sock) in list(self._parked.items()):
                if ptok == tok and tuple(key) in expected:
                    self._got[tuple(key)] = sock
                    del self._parked[(ptok, *key)]
        self._plan = plan
        t = threading.Thread(
            target=self._prepare, args=(plan, prep, post), name="genie-prepare", daemon=True
        )
        self._threads = [t]
        t.start()

    def _prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        t0 = time.monotonic()
        opts = prep.options
        try:
            streams: dict[int, dict[int, list[Stream]]] = {r: {} for r in plan.ranks}
            deadline = t0 + opts.connect_timeout_s
            for (r, q, k), sock in self._connect_pairs(plan, prep, deadline).items():
                streams[r].setdefault(q, [None] * opts.streams)[k] = Stream(sock, q, k)
            for (a, b, k), sock in self._await_incoming(plan, opts, deadline, "data").items():
                tune(sock, opts)
                streams[b].setdefault(a, [None] * opts.streams)[k] = Stream(sock, a, k)
            self._execs = {}
            allocated = 0
            for r in plan.ranks:
                rplans = {p: plans[r] for p, plans in enumerate(plan.rank_plans) if r in plans}
                ex = RankExecutor(r, streams[r], rplans, opts, self._abort)
                allocated += ex.allocate()
                self._execs[r] = ex
            msg = Prepared(
                job=prep.job,
                epoch=prep.epoch,
                ranks=list(plan.ranks),
                connections=len(self._socks),
                setup_s=time.monotonic() - t0,
            )
            post(Event("prepared", prep.job, prep.epoch, msg))
        except (TransportError, OSError, ValueError) as exc:
            self._close_job()
            post(Event("prepare_failed", prep.job, prep.epoch, error=f"{plan.agent}: {exc}"))

    def _connect_pairs(
        self, plan: AgentPlan, prep: Prepare, deadline: float
    ) -> dict[tuple[int, int, int], socket.socket]:
        """Connect and introduce every stream of this agent's outgoing rank pairs.

        Returns (my rank, peer rank, stream index) -> socket; the sockets are the job's.
        """
        opts = prep.options
        tok = token_bytes(opts.token)
        out = {}
        for r, q in plan.outgoing:
            host, _, port = prep.endpoints[prep.placement[q]].rpartition(":")
            host = host.strip("[]")
            for k in range(opts.streams):
                if self._abort.is_set():
                    raise TransportError("aborted during prepare")
                sock = self._connect(host, int(port), opts, deadline)
                self._socks.append(sock)
                sock.sendall(HANDSHAKE.pack(HANDSHAKE_MAGIC, tok, r, q, k, opts.streams))
                out[(r, q, k)] = sock
        return out

    def _await_incoming(
        self, plan: AgentPlan, opts: DataOptions, deadline: float, what: str
    ) -> dict[tuple[int, int, int], socket.socket]:
        """Wait until every expected incoming stream has been accepted, or fail at ``deadline``.

        Returns (peer rank, my rank, stream index) -> socket; the sockets are the job's.
        """
        with self._lock:
            while len(self._got) < len(self._expected):
                left = deadline - time.monotonic()
                if left <= 0 or self._abort.is_set():
                    missing = sorted(self._expected - set(self._got))
                    raise TransportError(
                        f"{plan.agent}: {len(missing)} {what} connections did not arrive within "
                        f"{opts.connect_timeout_s:.3g} s (first: rank {missing[0][0]} -> "
                        f"{missing[0][1]})"
                    )
                self._lock.wait(min(left, POLL_S))
            got = dict(self._got)
        self._socks.extend(got.values())
        return got

    def _connect(self, host: str, port: int, opts: DataOptions, deadline: float) -> socket.socket:
        last: Exception | None = None
        while time.monotonic() < deadline and not self._abort.is_set():
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            tune(sock, opts)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock.connect((host, port))
                sock.settimeout(None)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
                time.sleep(0.02)
        raise TransportError(f"cannot connect to data listener {host}:{port}: {last}")

    # ---- go -------------------------------------------------------------------------------
    def go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        """Run every local rank of program ``go.program`` in its own thread; post the result."""
        t = threading.Thread(
            target=self._go, args=(go, start_local_ns, post), name="genie-go", daemon=True
        )
        self._threads = [t]
        t.start()

    def _go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        oplists: dict[int, list[OpItem]] | None = None
        if go.ops:
            try:
                oplists = check_ops(go.ops, self._plan)
            except GenieError as exc:
                post(Event("run_failed", go.job, go.epoch, error=f"op list refused: {exc}"))
                return
            execs = [ex for ex in self._execs.values() if oplists.get(ex.rank)]
        else:
            execs = [ex for ex in self._execs.values() if go.program in ex.plans]

        def run(ex: RankExecutor) -> RankResult:
            if oplists is not None:
                return ex.run_ops(go, oplists[ex.rank], start_local_ns)
            return ex.run(go, start_local_ns)

        self._run_ranks(go, start_local_ns, execs, run, "genie-rank", post)

    def _run_ranks(
        self,
        go: Go,
        start_local_ns: int,
        execs: list,
        run: Callable[[object], RankResult],
        name: str,
        post: Callable[[Event], None],
    ) -> None:
        """Run ``run(ex)`` for every rank executor in its own thread; post the job's outcome.

        The first error (one that is not another rank's abort) fails the run and aborts the
        other ranks; otherwise the ranks' results go out as one ``Result``.
        """
        results: dict[int, RankResult] = {}
        errors: list[str] = []

        def work(ex) -> None:
            try:
                results[ex.rank] = run(ex)
            except TransportError as exc:
                errors.append(str(exc))
                self._abort.set()
            except Exception as exc:  # a bug must fail the run, not hang it
                errors.append(f"rank {ex.rank}: {type(exc).__name__}: {exc}")
                self._abort.set()

        threads = [
            threading.Thread(target=work, args=(ex,), name=f"{name}-{ex.rank}", daemon=True)
            for ex in execs
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            first = next((e for e in errors if "aborted" not in e), errors[0])
            post(Event("run_failed", go.job, go.epoch, error=first))
            return
        lateness = max(0, min((r.start[0] for r in results.values()), default=0) - start_local_ns)
        msg = Result(
            job=go.job,
            epoch=go.epoch,
            program=go.program,
            warmup=go.warmup,
            ranks=[results[r] for r in sorted(results)],
            start_lateness_ns=lateness,
        )
        post(Event("result", go.job, go.epoch, msg))

    # ---- release --------------------------------------------------------------------------
    def release(self) -> None:
        """Stop workers, close the job's connections, free its buffers."""
        self._abort.set()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=10)
        self._close_job()

    def _close_job(self) -> None:
        for ex in self._execs.values():
            ex.close()
        self._execs = {}
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
        self._socks = []
        with self._lock:
            for s in self._got.values():
                with contextlib.suppress(OSError):
                    s.close()
            self._token, self._expected, self._got = b"", set(), {}
        self._plan = None

    def close(self) -> None:
        """Release everything, including the listener."""
        self.release()
        self._closing = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.listener.close()
        self._acceptor.join(timeout=2)
        with self._lock:
            for _, s in self._parked.values():
                s.close()
            self._parked.clear()
