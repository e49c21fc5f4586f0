"""genie's RDMA WRITE flow vs perftest's ``ib_write_bw`` on the same device, side by side.

perftest: ``ib_write_bw`` server and client on this host over one device (loopback through the
NIC or soft-RoCE), ``--iters N`` RDMA WRITEs of ``--size`` bytes, tx depth ``--depth``;
its average bandwidth with ``--report_gbits`` (10^9 bit/s). genie: two local agents, one
flow/oneway step of N x size bytes over an RC queue pair in mode write_imm, cut into
``size``-byte work requests with ``--depth`` in flight (so the same messages and pipeline);
bandwidth = bytes / the step's time, median over rounds. Rounds alternate perftest and genie
(a shared box's load swings single runs). Goal: genie >= 0.95 x perftest.

When it cannot run here it says exactly which check failed and exits 1:
(1) ``ib_write_bw`` installed (Debian: perftest), (2) an RDMA device in /sys/class/infiniband,
(3) pyverbs importable, (4) an ACTIVE port with a RoCE v2 GID (or InfiniBand).

    .venv/bin/python bench/rdma_vs_perftest.py [--size 64KiB] [--iters 2000] [--depth 128]
                                               [--rounds 3] [--device rxe0]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import time

from genie.collectives.program import Program, ProgramSpec
from genie.controller.local import LocalCluster, free_port_range, open_controller
from genie.errors import TransportError
from genie.units import format_bytes, parse_size
from genie.wire.messages import DataOptions, RdmaOptions
from genie_agent.dataplane.rdma_conn import SYS_IB, choose_port, find_devices, no_device_message
from genie_agent.programs import BUILTIN


def why_not(device: str) -> tuple[str, object]:
    """("", choice) when both sides can run here, else (the failed check, None)."""
    if not shutil.which("ib_write_bw"):
        return "check 1 failed: ib_write_bw not installed (apt-get install perftest)", None
    devs = find_devices()
    if not devs:
        return f"check 2 failed (device in {SYS_IB}): {no_device_message()}", None
    try:
        from genie_agent.dataplane.rdma import load_pyverbs

        load_pyverbs()
    except TransportError as exc:
        return f"check 3 failed (pyverbs): {exc}", None
    try:
        choice = choose_port(devs, RdmaOptions(device=device or devs[0].name), "")
    except TransportError as exc:
        return f"check 4 failed (usable port and GID): {exc}", None
    return "", choice


def perftest_rate(choice, size: int, iters: int, depth: int) -> float:
    """ib_write_bw average bandwidth, bytes/s (server and client on this host)."""
    port = free_port_range(1)
    base = ["ib_write_bw", "-d", choice.device, "-i", str(choice.port), "-s", str(size)]
    base += ["-n", str(iters), "-t", str(depth), "-p", str(port), "-F", "--report_gbits"]
    if choice.link_layer != "InfiniBand":
        base += ["-x", str(choice.gid_index)]
    server = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(0.5)  # the server must listen before the client connects
        client = subprocess.run(
            [*base, "127.0.0.1"], capture_output=True, text=True, timeout=120, check=False
        )
    finally:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()  # the server we started, by its handle
            server.wait()
    if client.returncode != 0:
        raise SystemExit(f"ib_write_bw failed: {client.stdout.strip()[-300:]}")
    # data line: #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]
    rows = [ln.split() for ln in client.stdout.splitlines()]
    data = [r for r in rows if len(r) >= 5 and r[0] == str(size) and re.fullmatch(r"\d+", r[1])]
    if not data:
        raise SystemExit(f"cannot read ib_write_bw output: {client.stdout.strip()[-300:]}")
    return float(data[-1][3]) * 1e9 / 8


def genie_rate(ctl, choice, size: int, iters: int, depth: int) -> float:
    """A genie RDMA WRITE flow of iters x size bytes in size-byte requests, bytes/s."""
    total = size * iters
    spec = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=total)
    prog = Program(spec, BUILTIN[("flow", "oneway")])
    opts = DataOptions(
        transport="rdma",
        verify=False,
        rdma=RdmaOptions(
            device=choice.device,
            port=choice.port,
            gid_index=choice.gid_index,
            mode="write_imm",
            window=depth,
            segment=size,
        ),
    )
    ctl.prepare([prog], ["h0", "h1"], opts)
    try:
        out = ctl.run(iters=1, warmup=1)
    finally:
        ctl.release()
    return total / min(out.times())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="64KiB", help="message (work request) size")
    ap.add_argument("--iters", type=int, default=2000, help="messages per run")
    ap.add_argument("--depth", type=int, default=128, help="requests in flight")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="", help="verbs device (default: the first)")
    args = ap.parse_args()
    size = parse_size(args.size)
    why, choice = why_not(args.device)
    if why:
        print(f"rdma_vs_perftest cannot run here: {why}")
        return 1
    print(
        f"device {choice.device} port {choice.port} GID index {choice.gid_index}; "
        f"{args.iters} x {format_bytes(size)} RDMA WRITEs, {args.depth} in flight"
    )
    pt, ge = [], []
    with LocalCluster.start(2) as cl:
        ctl = open_controller(cl.testbed)
        try:
            ctl.connect()
            ctl.sync_clocks(rounds=4)
            for _ in range(args.rounds):
                pt.append(perftest_rate(choice, size, args.iters, args.depth))
                ge.append(genie_rate(ctl, choice, size, args.iters, args.depth))
        finally:
            ctl.close()
            ctl.t.close()
    p, g = statistics.median(pt), statistics.median(ge)
    print(f"{'':>10}  {'median Gbit/s (10^9 bit/s)':>28}  rounds")
    print(f"{'perftest':>10}  {p * 8 / 1e9:>28.2f}  " + " ".join(f"{x * 8 / 1e9:.2f}" for x in pt))
    print(f"{'genie':>10}  {g * 8 / 1e9:>28.2f}  " + " ".join(f"{x * 8 / 1e9:.2f}" for x in ge))
    ratio = g / p
    print(f"genie/perftest = {ratio:.3f} (goal >= 0.95: {'met' if ratio >= 0.95 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
