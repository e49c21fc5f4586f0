"""genie's TCP data plane vs iperf3 on the same loopback path, side by side in one run.

Single flow: iperf3 -c 127.0.0.1 (one stream) vs a genie point-to-point flow (flow/oneway,
1 connection). Parallel: iperf3 -P 4 vs the same genie flow split over 4 connections. Both
move data between two processes for about the same time; throughput = bytes / time. genie's
per-message CRC check is off here (``--verify`` turns it on) since iperf3 checks nothing.
Goal: genie >= 0.95 x iperf3 in both modes. Prints Gbit/s (10^9 bit/s) and the ratios.

    .venv/bin/python bench/tcp_vs_iperf3.py [--seconds 3] [--msg 64MiB] [--verify]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from agents.programs import BUILTIN
from agents.protocol import DataOptions
from genie.collectives.program import Program, ProgramSpec
from genie.controller.local import LocalCluster, free_port_range, open_controller
from genie.units import parse_size


def ensure_iperf3() -> str:
    """Path of iperf3, installing the Debian package if missing and allowed."""
    path = shutil.which("iperf3")
    if path:
        return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("iperf3 missing: apt-get install -y iperf3", file=sys.stderr)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "iperf3"], check=False, stdout=subprocess.DEVNULL
        )
    path = shutil.which("iperf3")
    if not path:
        sys.exit("iperf3 is not installed and could not be installed; nothing to compare")
    return path


def iperf3_rate(iperf: str, seconds: float, parallel: int) -> float:
    """Receiver-side throughput of iperf3 over loopback, bytes/s."""
    port = free_port_range(1)
    server = subprocess.Popen(
        [iperf, "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out = None
        for _ in range(50):
            r = subprocess.run(
                [
                    iperf,
                    "-c",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-t",
                    str(seconds),
                    "-P",
                    str(parallel),
                    "-J",
                ],
                capture_output=True,
                text=True,
                timeout=seconds + 30,
            )
            if r.returncode == 0:
                out = json.loads(r.stdout)
                break
            time.sleep(0.1)  # server not listening yet
        if out is None:
            raise SystemExit(f"iperf3 client failed: {r.stderr or r.stdout}")
        return out["end"]["sum_received"]["bits_per_second"] / 8
    finally:
        server.kill()
        server.wait()


def genie_rate(ctl, msg: int, seconds: float, streams: int, verify: bool) -> tuple[float, int]:
    """Throughput of a genie flow of ``msg``-byte messages back to back, bytes/s."""
    spec = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=msg)
    prog = Program(spec, BUILTIN[("flow", "oneway")])
    ctl.prepare([prog], ["h0", "h1"], DataOptions(streams=streams, verify=verify))
    try:
        probe = ctl.run(iters=2, warmup=1)  # size the run to ~``seconds``
        per = max(min(probe.times()), 1e-6)
        iters = max(3, min(2000, int(seconds / per)))
        out = ctl.run(iters=iters, warmup=1)
    finally:
        ctl.release()
    meas = [x for x in out.instances if not x.warmup]
    elapsed = (meas[-1].end_ns - meas[0].start_ns) / 1e9
    return msg * len(meas) / elapsed, len(meas)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each measurement")
    ap.add_argument("--msg", default="64MiB", help="genie message size (one step)")
    ap.add_argument("--verify", action="store_true", help="keep genie's CRC checks on")
    args = ap.parse_args()
    iperf = ensure_iperf3()
    ver = subprocess.run([iperf, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    msg = parse_size(args.msg)
    rows = []
    with LocalCluster.start(2) as cl:
        ctl = open_controller(cl.testbed)
        ctl.connect()
        ctl.sync_clocks()
        try:
            for streams in (1, 4):
                ip = iperf3_rate(iperf, args.seconds, streams)
                ge, n = genie_rate(ctl, msg, args.seconds, streams, args.verify)
                rows.append((streams, ip, ge, n))
        finally:
            ctl.close()
            ctl.t.close()
    print(
        f"loopback 127.0.0.1, {os.cpu_count()} CPUs shared with other work; {ver}; "
        f"genie message {args.msg}, CRC {'on' if args.verify else 'off'}; Gbit/s = 1e9 bit/s"
    )
    print(f"{'flows':>5}  {'iperf3 Gbit/s':>13}  {'genie Gbit/s':>12}  {'genie/iperf3':>12}  msgs")
    for streams, ip, ge, n in rows:
        print(f"{streams:>5}  {ip * 8 / 1e9:>13.2f}  {ge * 8 / 1e9:>12.2f}  {ge / ip:>12.3f}  {n}")
    ok = all(ge / ip >= 0.95 for _, ip, ge, _ in rows)
    print("goal genie >= 0.95 x iperf3:", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
