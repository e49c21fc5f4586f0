"""Helpers of the live tests: agent processes on loopback, raw control clients, controllers.

``start_agent`` runs ``python -m genie_agent`` (optionally under a file-descriptor limit) and waits
until it listens; ``RawClient`` is a bare ZeroMQ ROUTER that speaks the control protocol the way
any program on the network could, with whatever controller id it likes; ``closed`` ends a
controller and its transport; ``HOLDER`` is a controller process that holds a testbed's agents
in a long job (to be killed); ``netns_unavailable`` says why namespaces cannot be made here.
Every process started here is ended by pid (``Agent.stop``); every loop is bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zmq

from genie import __version__
from genie.testbed import dumps_testbed, loopback_testbed
from genie.wire import messages as p

HOLDER = textwrap.dedent(
    """
    import sys
    from genie.collectives import build_program
    from genie.controller.local import open_controller
    from genie.controller.session import Timeouts
    from genie.testbed import load_testbed

    tb = load_testbed(sys.argv[1])
    hb = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    ctl = open_controller(tb, timeouts=Timeouts(heartbeat_s=hb))
    ctl.connect()
    names = [h.name for h in tb.hosts]
    prog = build_program("all_reduce", "ring", len(names), 8 << 20, size_convention="nccl")
    ctl.prepare([prog], names)
    print("running", flush=True)
    ctl.run(0, iters=100_000, timeout_s=600)
    """
)
"""argv[1] testbed file, argv[2] heartbeat s: prints "running" once its long job runs."""


@contextlib.contextmanager
def closed(ctl) -> Iterator:
    """Use a controller, then close it and its transport whatever happens."""
    try:
        yield ctl
    finally:
        ctl.close()
        ctl.t.close()


def netns_unavailable(probe: str) -> str | None:
    """Why this process cannot make network namespaces (None if it can); ``probe`` is a name."""
    from genie.testbed import netns

    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if netns.tools_missing() or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Agent:
    """One agent process on loopback."""

    proc: subprocess.Popen
    name: str
    port: int
    data_port: int
    log: Path

    def text(self) -> str:
        """Its log so far."""
        return self.log.read_text(errors="replace")

    def rss_mib(self) -> float:
        """Resident memory, MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def fds(self) -> int:
        """Open file descriptors."""
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def wakeups(self) -> int:
        """Context switches of all its threads so far (voluntary and not)."""
        n = 0
        for f in Path(f"/proc/{self.proc.pid}/task").glob("*/status"):
            with contextlib.suppress(OSError):
                for line in f.read_text().splitlines():
                    if "ctxt_switches" in line:
                        n += int(line.split()[1])
        return n

    def cpu_s(self) -> float:
        """User + system CPU seconds so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s; by pid."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_agent(
    directory: Path,
    name: str = "h0",
    heartbeat: float = 0.5,
    extra: tuple[str, ...] = (),
    nofile: int | None = None,
    env: dict[str, str] | None = None,
) -> Agent:
    """Start one agent on 127.0.0.1 and wait (bounded) until it listens."""
    port = free_port()
    log = directory / f"agent-{name}-{port}.log"

    def limit() -> None:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "genie_agent", "--listen", f"127.0.0.1:{port}", "--id", name,
             "--data-addr", "127.0.0.1", "--heartbeat", str(heartbeat), *extra],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=limit, env={**os.environ, **(env or {})},
        )  # fmt: skip
    end = time.monotonic() + 20
    while True:
        text = log.read_text(errors="replace")
        m = re.search(r"127\.0\.0\.1:(\d+) \(data\)", text)
        if m:
            return Agent(proc, name, port, int(m.group(1)), log)
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"agent {name} did not start: {text[-500:]}")
        time.sleep(0.02)


def write_testbed(path: Path, agents: list[Agent]) -> Path:
    """A static loopback testbed file naming ``agents`` (in order)."""
    tb = loopback_testbed(len(agents), base_port=agents[0].port)
    hosts = [
        msgspec.structs.replace(h, control=f"127.0.0.1:{a.port}")
        for h, a in zip(tb.hosts, agents, strict=True)
    ]
    assert [h.name for h in hosts] == [a.name for a in agents], "name agents h0, h1, ..."
    path.write_text(dumps_testbed(msgspec.structs.replace(tb, hosts=hosts)))
    return path


class RawClient:
    """A bare ROUTER on the control port of one agent: any program could be this."""

    def __init__(
        self, agent: Agent, identity: str, curve: tuple[bytes, bytes, bytes] | None = None
    ) -> None:
        self.agent = agent.name
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        if curve:  # (own public, own secret, the agent's public)
            self.sock.curve_publickey, self.sock.curve_secretkey, self.sock.curve_serverkey = curve
        self.sock.setsockopt(zmq.ROUTING_ID, identity.encode())
        self.sock.setsockopt(zmq.CONNECT_ROUTING_ID, agent.name.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://127.0.0.1:{agent.port}")

    def send(self, msg: p.Msg | bytes) -> None:
        """Send a message (or raw bytes)."""
        frame = msg if isinstance(msg, bytes) else p.encode(msg)
        self.sock.send_multipart([self.agent.encode(), frame])

    def recv(self, timeout_s: float = 3.0, skip_beats: bool = True) -> p.Msg | None:
        """The next message (heartbeats skipped), or None after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while (left := end - time.monotonic()) > 0:
            if not self.sock.poll(int(left * 1000) + 1):
                return None
            msg = p.decode(self.sock.recv_multipart()[-1])
            if not (skip_beats and isinstance(msg, p.Heartbeat)):
                return msg
        return None

    def ask(self, msg: p.Msg, timeout_s: float = 3.0) -> p.Msg | None:
        """Send ``msg`` and return the first answer that is not a heartbeat."""
        self.send(msg)
        return self.recv(timeout_s)

    def hello(self, controller: str, testbed: str = "") -> p.Msg | None:
        """Claim the agent as ``controller``; the HelloReply or the refusal."""
        for _ in range(30):  # the connection may not be up yet: the first Hello can be lost
            got = self.ask(
                p.Hello(controller=controller, version=__version__, testbed=testbed), 0.2
            )
            if got is not None:
                return got
        return None

    def close(self) -> None:
        """Close the socket and its context."""
        self.sock.close(0)
        self.ctx.term()
