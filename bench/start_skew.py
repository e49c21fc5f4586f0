"""How together do agents start? Spread of step-0 start times after clock sync, and the
control round trip of a 1-byte collective.

For 2, 4 and 16 local agents (one rank each): connect, sync clocks (NTP-style, min-RTT), prepare a
1-byte ring all-gather, then repeat a synchronized Go (agents wait for it under SCHED_FIFO and
drop back to normal scheduling as the first step begins; ``--no-rt`` to compare); per
repetition the spread is the max - min over ranks of the first step's start, each converted to
the controller's clock with the agent's estimated offset. Also timed: go -> result (from the
scheduled start) and prepare -> result of a fresh 1-byte job. Goal: p50 spread < 200 us.

    .venv/bin/python bench/start_skew.py [--reps 40] [--agents 2,4,16] [--spin-us N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

from genie.collectives import build_program
from genie.controller.local import LocalCluster, open_controller


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=float), q))


_SLEEPER = r"""
import sys, time
from genie_agent.clock import sleep_until, tighten_timer_slack
from genie_agent.dataplane.tcp import _set_realtime
tighten_timer_slack()
reps, gap, spin, rt = (int(x) for x in sys.argv[1:5])
print("ready", flush=True)
base = int(sys.stdin.readline())
out = []
for k in range(reps):
    target = base + k * gap
    if rt:
        _set_realtime(True)
    sleep_until(target, spin)
    out.append(time.monotonic_ns())
    if rt:
        _set_realtime(False)
print(" ".join(map(str, out)))
"""


def os_floor(n: int, reps: int, spin_ns: int) -> list[float]:
    """Spread (us) of n bare processes waking at the same instants: this machine's floor now."""
    gap = 20_000_000
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SLEEPER, str(reps), str(gap), str(spin_ns), str(int(RT))],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    base = time.monotonic_ns() + 50_000_000
    for p in procs:
        p.stdin.write(f"{base}\n")
        p.stdin.close()
    rows = [list(map(int, p.stdout.read().split())) for p in procs]
    for p in procs:
        p.wait(timeout=60)
    return [(max(c) - min(c)) / 1e3 for c in zip(*rows, strict=True)]


RT = True


def measure(n: int, reps: int, spin_us: float | None) -> dict:
    """Spread and round-trip figures for n local agents."""
    with LocalCluster.start(n, heartbeat_s=0.5) as cl:
        ctl = open_controller(cl.testbed)
        try:
            ctl.connect()
            est = ctl.sync_clocks(rounds=16)
            placement = [h.name for h in cl.testbed.hosts]
            prog = build_program("all_gather", "ring", n, n, size_convention="nccl")
            spin = None if spin_us is None else int(spin_us * 1000)
            spreads, go_rt, late = [], [], []
            ctl.prepare([prog], placement)
            for _ in range(reps):
                out = ctl.run(iters=1, record_steps=True, spin_ns=spin, rt_start=RT)
                t1 = time.monotonic_ns()
                go_rt.append((t1 - out.start_at_ns) / 1e3)  # from the scheduled start
                spreads.append(out.instances[0].step0_spread_ns / 1e3)
                late.append(max(out.lateness_ns.values()) / 1e3)
            ctl.release()
            job_rt = []
            for _ in range(max(5, reps // 4)):
                t0 = time.monotonic_ns()
                ctl.prepare([prog], placement)
                out = ctl.run(iters=1, lead_s=0.0)
                job_rt.append((time.monotonic_ns() - t0) / 1e3)
                ctl.release()
            spin_used = ctl.default_spin_ns() if spin is None else spin
            return {
                "n": n,
                "floor": os_floor(n, reps, spin_used),
                "spin_us": spin_used / 1e3,
                "unc_us": max(e.uncertainty_ns for e in est.values()) / 1e3,
                "off_us": max(abs(e.offset_ns) for e in est.values()) / 1e3,
                "spread": spreads,
                "late": late,
                "go_rt": go_rt,
                "job_rt": job_rt,
            }
        finally:
            ctl.close()
            ctl.t.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--agents", default="2,4,16")
    ap.add_argument(
        "--spin-us",
        type=float,
        default=None,
        help="busy-wait before start (default: controller's choice)",
    )
    ap.add_argument(
        "--no-rt", action="store_true", help="agents wait without SCHED_FIFO (normal priority)"
    )
    args = ap.parse_args()
    global RT
    RT = not args.no_rt
    rows = [measure(int(n), args.reps, args.spin_us) for n in args.agents.split(",")]
    print(
        f"local agents on 127.0.0.1, {os.cpu_count()} CPUs shared with other work; "
        f"{args.reps} synchronized starts each; times in us"
    )
    print(
        f"{'agents':>6} {'rt':>3} {'spin':>4} {'unc':>6} {'|off|':>6} | "
        f"{'spread p50':>10} {'p99':>8} | "
        f"{'late p50':>8} | {'go->result p50':>14} {'p99':>8} | {'prepare->result p50':>19} "
        f"{'p99':>8} | {'OS floor p50':>12} {'p99':>8}"
    )
    for r in rows:
        print(
            f"{r['n']:>6} {'on' if RT else 'off':>3} {r['spin_us']:>4.0f} {r['unc_us']:>6.1f} "
            f"{r['off_us']:>6.1f} | "
            f"{pct(r['spread'], 50):>10.1f} {pct(r['spread'], 99):>8.1f} | "
            f"{pct(r['late'], 50):>8.1f} | "
            f"{pct(r['go_rt'], 50):>14.1f} {pct(r['go_rt'], 99):>8.1f} | "
            f"{pct(r['job_rt'], 50):>19.1f} {pct(r['job_rt'], 99):>8.1f} | "
            f"{pct(r['floor'], 50):>12.1f} {pct(r['floor'], 99):>8.1f}"
        )
    print(
        "rt = agents wait under SCHED_FIFO; unc = worst offset uncertainty (half min RTT); "
        "|off| = worst |estimated offset| (truly 0 here: one clock, so this is the sync error)"
    )
    print(
        "spread = max-min over ranks of step-0 start (controller clock); late = how long after "
        "the scheduled start the first rank began; go->result from the scheduled start; "
        "prepare->result = a fresh 1-byte job incl. connection setup; OS floor = spread of "
        "n bare Python processes sleeping to the same instants right now, same rt (no genie)"
    )
    for r in rows:
        met = "met" if pct(r["spread"], 50) < 200 else "NOT met"
        print(f"goal p50 spread < 200 us with {r['n']} agents: {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
