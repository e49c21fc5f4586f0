"""Control-plane load: N local agent processes register, run tiny collectives, one is killed.

Prints: agent start-up time, registration time (Hello to every HelloReply), clock-sync time, per
collective control overhead p50/p99 (wall time of one ``Controller.run`` minus the collective's
own completion time: Go fan-out, the synchronized-start lead, Result gathering), and the time
from ``kill -9`` of one agent mid-collective to the controller's abort naming it.

    .venv/bin/python bench/control_load.py            # 64 agents, 100 collectives
    .venv/bin/python bench/control_load.py --agents 16 --collectives 50 --heartbeat 0.2
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from genie.collectives import build_program
from genie.controller.local import LocalCluster, open_controller
from genie.controller.session import Timeouts
from genie.errors import RuntimeFault


def main() -> int:
    """Run the load test; print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--collectives", type=int, default=100)
    ap.add_argument("--size", type=int, default=4096, help="bytes per collective (whole buffer)")
    ap.add_argument("--heartbeat", type=float, default=0.5, help="heartbeat interval, s")
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
        victim = cluster.procs[n // 2]
        when: dict[str, float] = {}

        def kill() -> None:
            time.sleep(0.5)
            when["t"] = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
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
