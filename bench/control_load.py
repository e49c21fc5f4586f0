"""Control-plane load: N local agent processes register, run tiny collectives, one is killed.

Prints: agent start-up time, registration time (Hello to every HelloReply), clock-sync time, per
collective control overhead p50/p99 (wall time of one ``Controller.run`` minus the collective's
own completion time: Go fan-out, the synchronized-start lead, Result gathering), the time a
legitimate job (prepare, ``--job-runs`` collectives, release) takes without and then with
``--strangers`` connections held on the agents' data ports (valid-magic handshakes with random
tokens, the most expensive kind; goal: within 20%), one agent's resident memory before and after
``--frames`` refused control frames from a stranger (goal: under 5 MiB growth) and the log lines
they cost, and the time from ``kill -9`` of one agent mid-collective to the controller's abort
naming it.

    .venv/bin/python bench/control_load.py            # 64 agents, 100 collectives
    .venv/bin/python bench/control_load.py --agents 16 --collectives 50 --heartbeat 0.2
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import zmq

from genie.collectives import build_program
from genie.controller.local import LocalCluster, open_controller
from genie.controller.session import Controller, Timeouts
from genie.errors import RuntimeFault
from genie.wire import messages as p
from genie_agent.dataplane.tcp_wire import HANDSHAKE, HANDSHAKE_MAGIC


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid``, MiB (2^20 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def job_seconds(ctl: Controller, prog, names: list[str], runs: int) -> float:
    """Wall time of one legitimate job: prepare (data connections), ``runs`` Gos, release."""
    t0 = time.monotonic()
    ctl.prepare([prog], names)
    for _ in range(runs):
        ctl.run(0, iters=1)
    ctl.release()
    return time.monotonic() - t0


def hold_strangers(ports: list[int], n: int) -> list[socket.socket]:
    """Open ``n`` connections over ``ports``, each with a valid-magic, random-token handshake."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", ports[i % len(ports)]))
        s.sendall(HANDSHAKE.pack(HANDSHAKE_MAGIC, os.urandom(16), 0, 1, 0, 1))
        socks.append(s)
    return socks


def refuse_flood(port: int, agent: str, frames: int) -> None:
    """Send ``frames`` control frames the agent must refuse (as a stranger), draining answers."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.CONNECT_ROUTING_ID, agent.encode())
    sock.connect(f"tcp://127.0.0.1:{port}")
    time.sleep(0.3)
    hello = p.encode(p.Hello(controller="stranger", version="x"))
    for i in range(frames):
        sock.send_multipart([agent.encode(), hello if i % 2 else b"\xc1 not msgpack"])
        if i % 500 == 499:
            while sock.poll(0):
                sock.recv_multipart()
    while sock.poll(1000):
        while sock.poll(0):
            sock.recv_multipart()
    sock.close(0)
    ctx.term()


def main() -> int:
    """Run the load test; print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--collectives", type=int, default=100)
    ap.add_argument("--size", type=int, default=4096, help="bytes per collective (whole buffer)")
    ap.add_argument("--heartbeat", type=float, default=0.5, help="heartbeat interval, s")
    ap.add_argument("--strangers", type=int, default=1000, help="stranger data connections held")
    ap.add_argument("--job-runs", type=int, default=20, help="collectives in a timed job")
    ap.add_argument("--frames", type=int, default=100_000, help="refused frames sent to one agent")
    args = ap.parse_args()
    n = args.agents
    t0 = time.monotonic()
    cluster = LocalCluster.start(n, heartbeat_s=args.heartbeat)
    print(f"{n} agent processes started and listening in {time.monotonic() - t0:.2f} s")
    to = Timeouts(heartbeat_s=args.heartbeat, register_s=60.0)
    ctl = open_controller(cluster.testbed, timeouts=to)
    try:
        t0 = time.monotonic()
        ctl.connect()
        print(f"registration (Hello -> {n} HelloReplies): {(time.monotonic() - t0) * 1e3:.1f} ms")
        t0 = time.monotonic()
        ctl.sync_clocks(rounds=4)
        print(f"clock sync (4 probes x {n} agents): {(time.monotonic() - t0) * 1e3:.1f} ms")
        names = [h.name for h in cluster.testbed.hosts]
        prog = build_program("all_reduce", "ring", n, args.size, size_convention="nccl")
        t0 = time.monotonic()
        ctl.prepare([prog], names)
        print(f"prepare ({prog!r}, {n} agents connect): {(time.monotonic() - t0) * 1e3:.1f} ms")
        walls, coll, leads = [], [], []
        for _ in range(args.collectives):
            t0 = time.monotonic_ns()
            out = ctl.run(0, iters=1)
            walls.append((time.monotonic_ns() - t0) / 1e9)
            coll.append(out.instances[0].time_s)
            leads.append((out.start_at_ns - t0) / 1e9)
        w, c = np.array(walls), np.array(coll)
        over = w - c
        print(
            f"{args.collectives} collectives: completion p50 {np.percentile(c, 50) * 1e3:.2f} ms;"
            f" wall per run p50 {np.percentile(w, 50) * 1e3:.2f} ms"
        )
        print(
            f"control overhead per collective (wall - completion): p50 "
            f"{np.percentile(over, 50) * 1e3:.2f} ms, p99 {np.percentile(over, 99) * 1e3:.2f} ms "
            f"(of which start lead {np.median(leads) * 1e3:.1f} ms)"
        )
        ctl.release()
        base = [job_seconds(ctl, prog, names, args.job_runs) for _ in range(3)]
        hellos = ctl.hello
        strangers = hold_strangers([hellos[a].data_port for a in names], args.strangers)
        try:
            time.sleep(1.0)
            crowd = [job_seconds(ctl, prog, names, args.job_runs) for _ in range(3)]
        finally:
            for sk in strangers:
                sk.close()
        b, c = float(np.median(base)), float(np.median(crowd))
        print(
            f"legitimate job (prepare, {args.job_runs} collectives, release), median of 3: "
            f"{b * 1e3:.1f} ms alone, {c * 1e3:.1f} ms with {args.strangers} stranger data "
            f"connections held ({(c / b - 1) * 100:+.1f}%; goal within 20%)"
        )
        first = cluster.procs[0].pid
        log = cluster.dir / f"agent-{names[0]}.log"
        lines0 = len(log.read_text(errors="replace").splitlines())
        before = rss_mib(first)
        t0 = time.monotonic()
        port = int(cluster.testbed.hosts[0].control.rpartition(":")[2])
        refuse_flood(port, names[0], args.frames)
        took = time.monotonic() - t0
        time.sleep(0.5)
        after = rss_mib(first)
        lines = len(log.read_text(errors="replace").splitlines()) - lines0
        print(
            f"agent {names[0]} RSS {before:.1f} -> {after:.1f} MiB (MiB = 2^20 B) after "
            f"{args.frames} refused control frames in {took:.1f} s: {after - before:+.1f} MiB "
            f"(goal < 5 MiB), {lines} log lines"
        )
        victim = cluster.procs[n // 2]
        when: dict[str, float] = {}

        def kill() -> None:
            time.sleep(0.5)
            when["t"] = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
        ctl.prepare([prog], names)
        try:
            ctl.run(0, iters=100_000, timeout_s=600)  # the agents' max_iters
            print("error: the run survived the kill")
            return 1
        except RuntimeFault as exc:
            if "t" not in when:
                print(f"error: the run failed before the kill: {exc}")
                return 1
            dt = time.monotonic() - when["t"]
            print(
                f"kill -9 of agent {names[n // 2]} detected after {dt * 1e3:.0f} ms "
                f"(bound {3 * args.heartbeat * 1e3:.0f} ms = 3 beats): {exc}"
            )
        return 0
    finally:
        ctl.close()
        ctl.t.close()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
