"""The control plane under hostile and careless peers, with real agents on loopback (issue 18).

Each test is one row of the issue's table: it fails on the behaviour the issue measured. Raw
clients are bare ZeroMQ sockets (``_agents.RawClient``); controllers are genie's own. Agents and
controllers are processes started here and ended by pid; every loop is bounded.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import zmq
from _agents import HOLDER, Agent, RawClient, closed, start_agent, write_testbed

from genie.collectives import build_program
from genie.controller.local import open_controller
from genie.controller.session import Timeouts
from genie.errors import AgentBusy, AgentRefused, RuntimeFault
from genie.keys import init_keys, load_pair
from genie.testbed import load_testbed
from genie.wire import messages as p

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def agents(tmp_path):
    started: list[Agent] = []

    def start(n: int = 2, **kw) -> list[Agent]:
        for i in range(n):
            started.append(start_agent(tmp_path, f"h{i}", **kw))
        return started[-n:]

    yield start
    for a in started:
        a.stop()


def _controller(tmp_path: Path, agents: list[Agent], **kw):
    tb = load_testbed(write_testbed(tmp_path / "tb.toml", agents))
    to = Timeouts(register_s=5.0, abort_s=1.0, heartbeat_s=kw.pop("heartbeat_s", 0.5))
    return open_controller(tb, timeouts=to, **kw), [h.name for h in tb.hosts]


def _job(ctl, names: list[str]) -> None:
    ctl.prepare(
        [build_program("all_reduce", "ring", len(names), 4096, size_convention="nccl")], names
    )
    assert len(ctl.run(0, iters=2).instances) == 2
    ctl.release()


# ---- row 1: a second process names the holder's id ----------------------------------------
def test_naming_the_holders_id_does_not_take_the_agent_over(tmp_path, agents) -> None:
    a0, _a1 = agents(2)
    ctl, names = _controller(tmp_path, [a0, _a1])
    intruder = RawClient(a0, "intruder")
    try:
        ctl.connect()
        secret = ctl.sessions["h0"]
        # the busy error reveals the holder's id, as before; naming it gets the intruder nothing
        got = intruder.hello("someone-else")
        assert isinstance(got, p.Error) and got.code == "busy" and ctl.id in got.message
        got = intruder.ask(p.Hello(controller=ctl.id, version="x"))
        assert isinstance(got, p.Error) and got.code == "busy", got
        for msg in (p.Abort(job="x", epoch=1), p.Bye(), p.Quit(), p.Heartbeat()):
            got = intruder.ask(msg)
            assert isinstance(got, p.Error) and got.code == "busy", (msg, got)
            assert secret not in got.message
        _job(ctl, names)  # the real controller never noticed
    finally:
        intruder.close()
        ctl.close()
        ctl.t.close()
    assert secret not in a0.text()


def test_a_trusted_key_does_not_take_a_held_agent_over_either(tmp_path, agents) -> None:
    keys = tmp_path / "keys"
    init_keys(keys)
    a0, a1 = agents(2, env={"GENIE_KEYS": str(keys)})
    ctl, names = _controller(tmp_path, [a0, a1], keys_dir=str(keys))
    me, agent = load_pair(keys, "controller"), load_pair(keys, "agent")
    intruder = RawClient(a0, "intruder", curve=(me.public, me.secret, agent.public))
    try:
        ctl.connect()
        got = intruder.hello(ctl.id)  # same CURVE identity as the controller, and its id
        assert isinstance(got, p.Error) and got.code == "busy", got
        _job(ctl, names)
    finally:
        intruder.close()
        ctl.close()
        ctl.t.close()


# ---- row 13 on loopback: an agent serves one testbed ----------------------------------------
def test_an_agent_refuses_controllers_of_another_testbed(tmp_path, agents) -> None:
    (a0,) = agents(1, extra=("--testbed", "genie-t1-star"))
    c = RawClient(a0, "other-testbed")
    try:
        got = c.hello("ctl-x", testbed="genie-t2-star")
        assert isinstance(got, p.Error) and got.code == "testbed" and "genie-t1-star" in got.message
        got = c.hello("ctl-x", testbed="")
        assert isinstance(got, p.Error) and got.code == "testbed"
        got = c.hello("ctl-x", testbed="genie-t1-star")
        assert isinstance(got, p.HelloReply) and len(got.session) == 32
    finally:
        c.close()
    ctl, _ = _controller(tmp_path, [a0])  # a static testbed is another testbed
    with closed(ctl), pytest.raises(AgentRefused, match="serves testbed 'genie-t1-star'"):
        ctl.connect()


# ---- row 8: a killed controller does not keep its agents busy --------------------------------
def test_a_new_controller_gets_a_killed_ones_agents_within_a_beat(tmp_path, agents) -> None:
    a0, a1 = agents(2)  # 0.5 s beats: the old rule needed 3 silent beats (1.5 s)
    path = write_testbed(tmp_path / "tb.toml", [a0, a1])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert holder.stdout.readline().strip() == "running"
        time.sleep(0.3)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=5)
        killed = time.monotonic()
        time.sleep(0.8)  # under two beats: it missed one beat, and its connection closed
        ctl = open_controller(load_testbed(path), timeouts=Timeouts(register_s=3.0))
        with closed(ctl):
            ctl.connect()
            connected = time.monotonic() - killed
            _job(ctl, ["h0", "h1"])
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=5)
        holder.stdout.close()
    print(f"\nnew controller connected {connected:.2f} s after the old one's SIGKILL")
    assert all("disconnected" in a.text() for a in (a0, a1))


def test_sigterm_finishes_the_stored_run_interrupted(tmp_path, agents) -> None:
    from genie.store import RunStore

    a0, a1 = agents(2)
    path = write_testbed(tmp_path / "tb.toml", [a0, a1])
    store = tmp_path / "runs.sqlite"
    bench = subprocess.Popen(
        [sys.executable, "-m", "genie", "bench", "--testbed", str(path), "--sizes", "64MiB",
         "--iters", "100000", "--warmup", "0", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and "idle" not in a0.text() and bench.poll() is None:
            if store.exists():
                with RunStore(store) as st:
                    runs = st.list_runs()
                if runs and runs[0].instances > 0:
                    break
            time.sleep(0.1)
        bench.send_signal(signal.SIGTERM)
        _out, err = bench.communicate(timeout=20)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.communicate(timeout=5)
    assert bench.returncode == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "genie: terminated (SIGTERM)"
    with RunStore(store) as st:
        (info,) = st.list_runs()
    assert info.status == "interrupted" and "SIGTERM" in info.error
    assert info.instances > 0 and info.finished_at is not None


# ---- rows 2, 3: a cheap Prepare does not freeze the agent ------------------------------------
def _spec(chunks: int, n: int = 2) -> bytes:
    spec = {"collective": "all_reduce", "algorithm": "ring", "n_ranks": n, "size": 1 << 20}
    return msgspec.msgpack.encode({**spec, "chunks": chunks})


def test_building_programs_never_stops_the_heartbeat(tmp_path, agents) -> None:
    hb = 0.1
    (a0,) = agents(1, heartbeat=hb)
    c = RawClient(a0, "ctl-raw")
    try:
        reply = c.hello("ctl-raw")
        assert isinstance(reply, p.HelloReply)
        s = reply.session
        prep = p.Prepare(
            job="j1",
            epoch=1,
            session=s,
            programs=[_spec(12_500)],  # ~150,000 steps to build: about a second of CPU
            placement=["h0", "h0"],
            endpoints={"h0": f"127.0.0.1:{a0.data_port}"},
        )
        frame = p.encode(prep)
        t0 = last = time.monotonic()
        c.send(frame)
        gap, answer = 0.0, None
        while time.monotonic() - t0 < 60:
            m = c.recv(1.0, skip_beats=False)
            now = time.monotonic()
            if m is None:
                gap = max(gap, now - last)
                continue
            gap, last = max(gap, now - last), now
            if not isinstance(m, p.Heartbeat):
                answer = m
                break
            c.send(p.Heartbeat(job="j1", epoch=1, session=s))
        took = time.monotonic() - t0
        print(f"\n{len(frame)}-byte Prepare: answered in {took:.2f} s, longest silence {gap:.2f} s")
        assert isinstance(answer, p.Prepared), answer
        assert gap < 3 * hb  # the agent beat all along (it froze for 13-36 s)
        # past the bound: refused at once, before anything is built
        t0 = time.monotonic()
        got = c.ask(p.Release(job="j1", epoch=1, session=s))
        assert isinstance(got, p.Ack)
        huge = msgspec.structs.replace(
            prep, job="j2", epoch=2, programs=[_spec(35_000, 3)], placement=["h0"] * 3
        )
        got = c.ask(huge)
        assert isinstance(got, p.Error) and got.code == "limit" and "steps built" in got.message
        assert time.monotonic() - t0 < 2.0
    finally:
        c.close()


def test_bench_with_many_chunks_is_not_taken_for_a_dead_peer(tmp_path, agents) -> None:
    from genie.api.benchmark import BenchSpec, bench

    got = agents(4)
    path = write_testbed(tmp_path / "tb.toml", got)
    cfg = BenchSpec(
        testbed=str(path),
        sizes=[1 << 20],
        chunks=2048,
        iters=1,
        warmup=0,
        store=None,
        progress=False,
    )
    t0 = time.monotonic()
    res = bench(cfg)  # was: "controller lost after 3 beats"
    _run_id, rows = res.run_id, res.rows
    print(f"\nbench --chunks 2048 on 4 agents: {time.monotonic() - t0:.1f} s")
    assert rows[0].stats.n == 1 and math.isfinite(rows[0].stats.p50)


# ---- row 4: refused frames cost no memory and little log --------------------------------------
def test_refused_frames_neither_grow_the_agent_nor_flood_its_log(tmp_path, agents) -> None:
    (a0,) = agents(1)
    holder = RawClient(a0, "holder")
    flood = RawClient(a0, "flood")
    try:
        evil = "ctl\n2099-01-01 00:00:00.000 genie-agent h0: forged line\x1b[2J"
        assert isinstance(holder.hello(evil), p.HelloReply)
        assert isinstance(flood.ask(p.Hello(controller="x", version="x")), p.Error)
        time.sleep(0.5)
        before = a0.rss_mib()
        n = 100_000
        for i in range(n):
            flood.send(b"\xc1 not msgpack" if i % 2 else p.Hello(controller="x", version="x"))
            if i % 500 == 499:
                while flood.sock.poll(0):
                    flood.sock.recv_multipart()
        end = time.monotonic() + 20
        while time.monotonic() < end and flood.sock.poll(500):
            while flood.sock.poll(0):
                flood.sock.recv_multipart()
        after = a0.rss_mib()
    finally:
        holder.close()
        flood.close()
    lines = a0.text().splitlines()
    print(f"\n{n} refused frames: RSS {before:.1f} -> {after:.1f} MiB, {len(lines)} log lines")
    assert after - before < 5.0  # was +14 MiB per 100k (every refusal kept in a list)
    assert len(lines) < 500  # was one line per frame
    assert any("held back" in line for line in lines)
    assert all(line[:4].isdigit() and " genie-agent h0: " in line for line in lines), lines[:5]
    assert "forged line" in a0.text() and "\\x0a" in a0.text() and "\x1b" not in a0.text()


# ---- row 12: a wrong key is named at once, a key-rotating peer does not flood ----------------
def test_a_wrong_agent_key_is_named_at_once_and_logged(tmp_path, agents) -> None:
    keys = tmp_path / "keys"
    init_keys(keys)
    (a0,) = agents(1, env={"GENIE_KEYS": str(keys)})
    wrong = tmp_path / "wrong"
    init_keys(wrong)  # the right controller pair, but another agent public key
    for name in ("controller.public", "controller.secret"):
        (wrong / name).write_bytes((keys / name).read_bytes())
    ctl, _ = _controller(tmp_path, [a0], keys_dir=str(wrong))
    t0 = time.monotonic()
    with closed(ctl), pytest.raises(AgentRefused, match="refused this controller"):
        ctl.connect()
    took = time.monotonic() - t0
    print(f"\nwrong agent key: refused after {took * 1e3:.0f} ms")
    assert took < 3.0  # was a 10 s timeout
    end = time.monotonic() + 3
    while "cryptographic error" not in a0.text() and time.monotonic() < end:
        time.sleep(0.05)
    assert "CURVE cryptographic error" in a0.text()
    # a controller with a fresh unknown key on every attempt
    agent = load_pair(keys, "agent")
    attempts = 300
    for _ in range(attempts):
        pub, sec = zmq.curve_keypair()
        c = RawClient(a0, "rotating", curve=(pub, sec, agent.public))
        c.send(p.Hello(controller="x", version="x"))
        time.sleep(0.005)
        c.close()
    time.sleep(1.0)
    auth = [ln for ln in a0.text().splitlines() if "auth: refused" in ln]
    print(f"{attempts} key-rotating attempts: {len(auth)} auth log lines")
    assert 1 <= len(auth) < 60  # was one line per attempt


# ---- row 14: an idle agent sleeps ------------------------------------------------------------
def test_an_idle_agent_sleeps(tmp_path, agents) -> None:
    (a0,) = agents(1)
    time.sleep(0.5)
    w0, c0, t0 = a0.wakeups(), a0.cpu_s(), time.monotonic()
    time.sleep(3.0)
    rate = (a0.wakeups() - w0) / (time.monotonic() - t0)
    cpu = (a0.cpu_s() - c0) / (time.monotonic() - t0)
    print(f"\nidle agent: {rate:.1f} wake-ups/s, {cpu * 100:.2f}% of a core")
    assert rate < 20  # was ~1,100/s (a 1 ms poll)


# ---- row 11, the agent's side: it checks its own flags ---------------------------------------
@pytest.mark.parametrize(
    "flags",
    [
        ["--heartbeat", "0"],
        ["--heartbeat", "nan"],
        ["--heartbeat", "inf"],
        ["--heartbeat", "-1"],
        ["--data-port", "70000"],
        ["--data-port", "-5"],
        ["--id", "a b"],
        ["--data-addr", "not-an-ip"],
        ["--testbed", "x y"],
    ],
)
def test_the_agent_refuses_bad_flags_in_one_line(flags) -> None:
    argv = ["--listen", "127.0.0.1:1", "--id", "h0", *flags]
    out = subprocess.run(
        [sys.executable, "-m", "genie_agent", *argv],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("genie-agent: error: ") and flags[0] in lines[0]


# ---- a socket buffer of a TiB: refused at once, not a silent prepare thread ------------------
def test_out_of_range_data_options_are_refused_at_once(tmp_path, agents) -> None:
    got = agents(2)
    ctl, names = _controller(tmp_path, got)
    prog = build_program("all_reduce", "ring", 2, 4096, size_convention="nccl")
    with closed(ctl):
        ctl.connect()
        for opts, word in (
            (p.DataOptions(sndbuf=1 << 40), "sndbuf"),
            (p.DataOptions(connect_timeout_s=700.0), "connect timeout"),
            (p.DataOptions(token="not hex"), "token"),
            (p.DataOptions(streams=4, channels=3), "channels do not divide"),
            (p.DataOptions(streams=2, channels=2, program_channels=[2]), "program channel"),
            (p.DataOptions(streams=2, channels=2, program_channels=[0, 1]), "2 program channels"),
        ):
            t0 = time.monotonic()
            with pytest.raises(RuntimeFault, match=word):
                ctl.prepare([prog], names, opts)
            assert time.monotonic() - t0 < 2.0  # was: the 10 s connect timeout
        _job(ctl, names)


def test_busy_is_still_busy_for_a_live_holder(tmp_path, agents) -> None:
    """What held: a live holder keeps its agents against another controller."""
    got = agents(2)
    first, names = _controller(tmp_path, got)
    second, _ = _controller(tmp_path, got)
    try:
        first.connect()
        time.sleep(1.5)  # the keepalive beats while the holder does nothing
        with pytest.raises(AgentBusy):
            second.connect()
        _job(first, names)
    finally:
        for c in (first, second):
            c.close()
            c.t.close()


# ---- issue 17, item 4: no abort, ever ---------------------------------------------------------
class HangUp:
    """A TCP server that answers every connection with 2 bytes (a ZMTP 1.0 routing-id frame, to
    libzmq) and hangs up: a non-genie service on an agent's port. Bounded: stops on ``close``."""

    def __init__(self) -> None:
        import threading

        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.ls.settimeout(0.1)
        self.port = self.ls.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.ls.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"\x01\x00")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.ls.close()


DRIVER = """
import sys
from genie.api.benchmark import BenchSpec, bench
from genie.controller.session import Timeouts
from genie.errors import GenieError
cfg = BenchSpec(testbed=sys.argv[1], store=sys.argv[2], progress=False)
try:
    bench(cfg, timeouts=Timeouts(register_s=float(sys.argv[3])))
except GenieError as exc:
    print(f"genie: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def test_a_non_genie_peer_never_aborts_the_controller(tmp_path) -> None:
    from genie.store import RunStore
    from genie.testbed import dumps_testbed, loopback_testbed

    peers = [HangUp(), HangUp()]
    try:
        tb = loopback_testbed(2, base_port=peers[0].port)
        hosts = [
            msgspec.structs.replace(h, control=f"127.0.0.1:{s.port}")
            for h, s in zip(tb.hosts, peers, strict=True)
        ]
        path = tmp_path / "tb.toml"
        path.write_text(dumps_testbed(msgspec.structs.replace(tb, hosts=hosts)))
        store = tmp_path / "runs.sqlite"
        codes = []
        for _ in range(2):  # libzmq's assert needed a reconnect while the socket closed
            out = subprocess.run(
                [sys.executable, "-c", DRIVER, str(path), str(store), "3.0"],
                capture_output=True, text=True, timeout=60, cwd=REPO,
            )  # fmt: skip
            codes.append(out.returncode)
            assert "zmtp_engine" not in out.stderr, out.stderr  # was: abort, exit 134
    finally:
        for s in peers:
            s.close()
    assert codes == [1, 1], out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert "the control handshake fails: not a genie agent" in line and "h0" in line
    with RunStore(store) as st:
        assert {(r.status, r.error) for r in st.list_runs()} == {("failed", line[14:])}
