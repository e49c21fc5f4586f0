"""genie's agents over real RDMA verbs: soft-RoCE (rdma_rxe) in a QEMU guest (tests/guest.py).

This machine's kernel has no rdma_rxe; Debian's kernel, booted under QEMU TCG with this
machine's root read-only, has. In one boot the guest

1. loads rdma_rxe, makes a veth pair and adds an rxe device on each end with
   ``genie testbed softroce up --netdev`` (genie-rxe0 on h0's end, genie-rxe1 on h1's);
2. starts two ``genie agent``s (h0 on one veth address, h1 on the other) described by a static
   testbed file with ``transport = "rdma"`` and each host's own ``rdma_device``;
3. checks the data of all_reduce (ring) and all_to_all (direct) over RDMA: each rank's buffer
   CRC after the iterations (computed by the agents with genie's verify option) against the
   data executor's result, and the bytes received against the plan (genie bench does not
   compare the CRCs itself); runs ``genie bench`` all_reduce and all_to_all; and
   ``genie emulate --mode isolated`` of a small data-parallel step (one gradient all-reduce);
4. reads both rxe devices' ``hw_counters`` before and after each of those steps: the packets
   each device sent and received prove the bytes went over verbs from one device to the other
   (TCP moves none of them);
5. stops the agents by pid, ``genie testbed softroce down``, and removes the veth.

Both devices live in the guest's initial network namespace, not one per agent in two
namespaces: Debian 12's kernel (6.1) routes every rxe packet in the initial namespace
(rdma_rxe learned namespaces in later kernels), so a work request from an rxe device whose
netdev lives in another namespace fails at once with "local QP operation error". In one
namespace the kernel would deliver traffic between two of its own addresses on the loopback
device, where no rxe device listens; policy routing (``_cross_routes``: a rule per direction,
for locally originated packets, ahead of the local table; ``accept_local`` and no reverse-path
filter on the veth ends; static neighbours) sends it out of one veth end into the other, so
each agent's queue pairs live on its own device and every packet crosses the veth. The agents
and every controller command run with a wider liveness rule (``GUEST_MISSED_BEATS``: the
agents' ``--missed-beats`` and the testbed file's ``missed_beats``, which controllers take): the
emulated CPUs stall for seconds on a loaded machine.

Everything prints what it ran (the commands) and the figures (times, counters). Times measure
the emulated CPU, not a wire: sizes are small and iterations few; this proves the path, not the
speed. Skipped where no guest can run (QEMU, the kernel image or its rdma_rxe absent) or
pyverbs is not installed.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.guest import REPO, GuestResult, guest_unavailable, run_steps_in_guest

pytestmark = pytest.mark.slow

GENIE = REPO / ".venv" / "bin" / "genie"
PYTHON = REPO / ".venv" / "bin" / "python"
PREFIX = "genie-gr-"
HOSTS = ("h0", "h1")
VETH = {"h0": f"{PREFIX}va", "h1": f"{PREFIX}vb"}
ADDR = {"h0": "198.18.0.1", "h1": "198.18.0.2"}  # benchmarking range, only inside the guest
CONTROL_PORT = 7700
# genie testbed softroce up names its links genie-rxe<N> in order (h0's end first); the testbed
# file binds each agent to its own
RXE = {"h0": "genie-rxe0", "h1": "genie-rxe1"}
TESTBED = "/tmp/genie-gr.toml"  # the guest's /tmp (a tmpfs)
STORE = "/tmp/genie-gr-runs.sqlite"
SIZES = (4096, 65536)
ITERS, WARMUP = 4, 1
VERIFY_SIZE = 3 * 20_000  # odd-sized: the ring's shards and all-to-all's blocks are uneven
VERIFY_ITERS = 3
# emulate: one data-parallel step of 2 ranks with one gradient bucket (2 layers, hidden 64,
# bf16): a single all-reduce of 2 x 12 x 64 x 64 x 2 bytes
DP_ARGS = "--ranks 2 --layers 2 --hidden 64 --bucket 1MiB --for genie"
DP_BYTES = 2 * 12 * 64 * 64 * 2
EMULATE_ITERS, EMULATE_WARMUP = 3, 1
# heartbeat intervals (0.5 s) of silence before a peer is lost, in the guest only (genie: 3):
# under TCG on a loaded machine the emulated CPUs stall for seconds at a time (an agent's RDMA
# prepare, opening the device and registering memory, holds its GIL for most of a second even
# on an idle guest), and both sides of the control channel then lose each other mid-prepare
GUEST_MISSED_BEATS = 20
MAX_MTU = 4096  # RoCE's largest path MTU: a lower bound on packets is bytes / this

TESTBED_TOML = f"""[testbed]
name = "genie-gr"
kind = "static"
transport = "rdma"
missed_beats = {GUEST_MISSED_BEATS}

[topology]
shape = "star"
rate = "1gbit"
mtu = 1500
""" + "".join(
    f"""
[[hosts]]
name = "{h}"
control = "{ADDR[h]}:{CONTROL_PORT}"
data_addr = "{ADDR[h]}"
nic = "{VETH[h]}"
rdma_device = "{RXE[h]}"
"""
    for h in HOSTS
)


def _snapshot(label: str) -> str:
    """Shell: every counter of every rxe port as 'device counter value' lines, saved as
    $GENIE_GUEST_OUT/counters-LABEL.txt."""
    return (
        "for c in /sys/class/infiniband/*/ports/*/hw_counters/*; do"
        ' d=${c#/sys/class/infiniband/}; echo "${d%%/*} ${c##*/} $(cat "$c")"; done'
        f' > "$GENIE_GUEST_OUT/counters-{label}.txt"'
    )


def _counted(label: str, cmd: str) -> str:
    """Shell: ``cmd`` printed, then run between two counter snapshots; its exit status kept."""
    shown = cmd.replace(GENIE_CMD, "genie")
    return (
        f"echo {shlex.quote('$ ' + shown)}\n{_snapshot(label + '-before')}\n{cmd}\nrc=$?\n"
        f"{_snapshot(label + '-after')}\nexit $rc\n"
    )


GENIE_CMD = str(GENIE)  # printed as the plain `genie ...` command
BENCH = (
    f"{GENIE_CMD} bench --testbed {TESTBED} --transport rdma --sizes {','.join(map(str, SIZES))}"
    f" --iters {ITERS} --warmup {WARMUP} --repeats 1 --slow-rate 10mbit --json --no-store"
)
VERIFY = (
    f"env PYTHONPATH={shlex.quote(str(REPO))} {PYTHON} -m tests.test_guest_rdma verify"
    f" {TESTBED} {VERIFY_SIZE} {VERIFY_ITERS}"
)
EMULATE = (
    f"{GENIE_CMD} emulate /tmp/genie-gr-dp --testbed {TESTBED} --mode isolated"
    f" --iterations {EMULATE_ITERS} --warmup {EMULATE_WARMUP} --store {STORE} --json"
)


def _cross_routes() -> str:
    """Shell: make each veth end's address reach the other's over the veth, not loopback."""
    lines = [
        "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
    ]
    for i, (a, b) in enumerate((("h0", "h1"), ("h1", "h0"))):
        table = 1700 + i
        lines += [
            f"sysctl -qw net.ipv4.conf.{VETH[a]}.rp_filter=0"
            f" net.ipv4.conf.{VETH[a]}.accept_local=1",
            f"ip neigh replace {ADDR[b]} lladdr $(cat /sys/class/net/{VETH[b]}/address)"
            f" dev {VETH[a]} nud permanent",
            f"ip route add {ADDR[b]} dev {VETH[a]} src {ADDR[a]} table {table}",
            f"ip rule add pref {100 + i} iif lo from {ADDR[a]} to {ADDR[b]} lookup {table}",
        ]
    lines += ["ip rule add pref 1000 lookup local", "ip rule del pref 0 lookup local"]
    return "\n".join(lines)


CROSS_ROUTES = _cross_routes()

SETUP = f"""set -e
modprobe rdma_rxe
ip link add {VETH["h0"]} type veth peer name {VETH["h1"]}
ip addr add {ADDR["h0"]}/30 dev {VETH["h0"]}
ip addr add {ADDR["h1"]}/30 dev {VETH["h1"]}
ip link set {VETH["h0"]} up
ip link set {VETH["h1"]} up
{CROSS_ROUTES}
echo '$ genie testbed softroce up --netdev {VETH["h0"]}'
{GENIE} testbed softroce up --netdev {VETH["h0"]}
echo '$ genie testbed softroce up --netdev {VETH["h1"]}'
{GENIE} testbed softroce up --netdev {VETH["h1"]}
rdma link show
ip rule show
cat > {TESTBED} <<'EOF'
{TESTBED_TOML}EOF
{GENIE} workload generate dp {DP_ARGS} --out /tmp/genie-gr-dp
"""

AGENTS = "set -e\n" + "".join(
    f"""setsid {GENIE_CMD} agent --listen {ADDR[h]}:{CONTROL_PORT} --id {h} \\
    --missed-beats {GUEST_MISSED_BEATS} \\
    > "$GENIE_GUEST_OUT/agent-{h}.log" 2>&1 < /dev/null &
echo $! >> /tmp/genie-gr-agents.pids
echo "$ genie agent --listen {ADDR[h]}:{CONTROL_PORT} --id {h} \\
    --missed-beats {GUEST_MISSED_BEATS} (pid $!)"
"""
    for h in HOSTS
)

DOWN = f"""for pid in $(cat /tmp/genie-gr-agents.pids); do kill "$pid"; done
sleep 1
{GENIE} testbed softroce down
ip link del {VETH["h0"]}
rdma link show | grep genie || true
ip link show | grep {PREFIX} || true
"""

STEPS = {
    "setup": SETUP,
    "agents": AGENTS,
    "verify": _counted("verify", VERIFY),
    "bench_all_reduce": _counted(
        "bench_all_reduce", f"{BENCH} --collective all_reduce --algo ring"
    ),
    "bench_all_to_all": _counted(
        "bench_all_to_all", f"{BENCH} --collective all_to_all --algo direct"
    ),
    "emulate": _counted("emulate", EMULATE),
    "down": DOWN,
}


# ---- run in the guest: the data of each collective over RDMA against the data executor --------
def verify_main(testbed_path: str, size: int, iters: int) -> int:
    """Run all_reduce (ring) and all_to_all (direct) of ``size`` bytes over RDMA on the testbed's
    two agents with verify on; print, per collective, each rank's buffer CRC as the agents
    report it and as the data executor computes it, and bytes received vs the plan (JSON)."""
    import numpy as np

    from genie.collectives import build_program
    from genie.collectives.data_exec import run_data
    from genie.collectives.program import Op
    from genie.controller.local import open_controller
    from genie.controller.session import Timeouts
    from genie.testbed.loader import load_testbed
    from genie.wire.messages import DataOptions, RdmaOptions
    from genie_agent.dataplane.tcp import pattern_fill

    tb = load_testbed(testbed_path)
    devices = {h.name: h.rdma_device for h in tb.hosts if h.rdma_device}
    ctl = open_controller(tb, Timeouts(prepare_base_s=60))
    out: dict[str, Any] = {}
    try:
        ctl.connect()
        ctl.sync_clocks(rounds=4)
        for coll, algo in (("all_reduce", "ring"), ("all_to_all", "direct")):
            prog = build_program(coll, algo, len(tb.hosts), size)
            opts = DataOptions(transport="rdma", verify=True, rdma=RdmaOptions(devices=devices))
            t0 = time.monotonic()
            ctl.prepare([prog], [h.name for h in tb.hosts], opts)
            t1 = time.monotonic()
            res = ctl.run(iters=iters, warmup=1)
            print(
                f"{coll}: prepare {t1 - t0:.1f}s, run {time.monotonic() - t1:.1f}s", file=sys.stderr
            )
            ctl.release()
            ranks = {r.rank: r for x in res.results.values() for r in x.ranks}
            bufs = []
            for r in range(prog.n_ranks):
                b = np.empty(prog.buffer_bytes(r), dtype=np.uint8)
                pattern_fill(b, r)
                bufs.append(b.astype(np.int64))
            for _ in range(iters + 1):  # warm-up and measured iterations alike
                bufs = [b % 256 for b in run_data(prog, bufs).buffers]
            want_rx = {
                r: (iters + 1) * sum(s.nbytes for s in prog.steps(r) if s.op == Op.RECV)
                for r in range(prog.n_ranks)
            }
            out[coll] = {
                "got_crc": {r: x.buffer_crc for r, x in sorted(ranks.items())},
                "want_crc": {
                    r: zlib.crc32(b.astype(np.uint8).tobytes()) for r, b in enumerate(bufs)
                },
                "got_rx": {r: x.bytes_received for r, x in sorted(ranks.items())},
                "want_rx": want_rx,
                "times_s": {
                    r: [(e - s) / 1e9 for s, e in zip(x.start, x.end, strict=True)]
                    for r, x in sorted(ranks.items())
                },
            }
    finally:
        ctl.close()
        ctl.t.close()
    print(json.dumps(out))
    return 0


# ---- on this machine: the test ------------------------------------------------------------
def _why_not() -> str | None:
    reason = guest_unavailable()
    if reason:
        return reason
    if not GENIE.is_file():
        return f"no {GENIE} (this checkout's venv)"
    dist = [Path(p) / "pyverbs" for p in ("/usr/lib/python3/dist-packages",)]
    if not any(d.is_dir() for d in dist):
        return "no pyverbs on this machine (apt-get install python3-pyverbs)"
    from tests.guest import _has_module, _kernels

    ver = _kernels()[0][0]
    if not _has_module(ver, "rdma_rxe"):
        return f"kernel {ver} has no rdma_rxe module"
    return None


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> GuestResult:
    """One guest boot running every step of this module (in the guest's /tmp)."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("genie-guest-rdma")
    env = {"GENIE_STATE_DIR": "/tmp/genie-gr-state"}
    res = run_steps_in_guest(STEPS, timeout_s=900, env=env, out_dir=out, cwd=Path("/tmp"))
    print(f"guest: booted in {res.boot_s:.1f}s, whole run {res.wall_s:.1f}s")
    return res


# ---- the tests ----------------------------------------------------------------------------
def _ok(guest: GuestResult, name: str) -> str:
    step = guest.step(name)
    print(f"--- {name}: rc {step.rc} in {step.seconds:.1f}s")
    assert step.rc == 0, f"{name}: rc {step.rc}\n{step.stdout[-3000:]}\n{step.stderr[-3000:]}"
    return step.stdout


def _counters(guest: GuestResult, label: str) -> dict[tuple[str, str], int]:
    """What each rxe counter moved during step ``label`` (after - before), non-zero ones."""
    assert guest.out_dir is not None

    def read(which: str) -> dict[tuple[str, str], int]:
        text = (guest.out_dir / f"counters-{label}-{which}.txt").read_text()  # type: ignore[operator]
        rows = [line.split() for line in text.splitlines()]
        return {(r[0], r[1]): int(r[2]) for r in rows if len(r) == 3 and r[2].isdigit()}

    before, after = read("before"), read("after")
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    print(
        f"rxe counters during {label}: " + ", ".join(f"{d} {c} +{v}" for (d, c), v in moved.items())
    )
    return moved


def _min_pkts(moved: dict[tuple[str, str], int]) -> int:
    """The fewest packets any of the two hosts' rxe devices sent or received: each agent's
    traffic left its own device and arrived at the other's."""
    return min(moved.get((RXE[h], c), 0) for h in HOSTS for c in ("sent_pkts", "rcvd_pkts"))


def _json_tail(text: str) -> Any:
    """The JSON document that ends ``text`` (a command's --json output)."""
    return json.loads(text[text.index("{") :])


def test_data_over_rdma_is_the_collectives_result(guest: GuestResult) -> None:
    _ok(guest, "setup")
    _ok(guest, "agents")
    out = _ok(guest, "verify")
    print(out.splitlines()[0])
    doc = json.loads(out.strip().splitlines()[-1])
    for coll in ("all_reduce", "all_to_all"):
        d = doc[coll]
        print(f"{coll} {VERIFY_SIZE} B over RDMA: CRCs {d['got_crc']} (want {d['want_crc']}),"
              f" bytes received {d['got_rx']}, iteration times {d['times_s']}")  # fmt: skip
        assert d["got_crc"] == d["want_crc"] and d["got_rx"] == d["want_rx"], d
    # two collectives, each iteration: every byte a rank receives came from the other's device
    want_bytes = min(sum(doc[c]["want_rx"][r] for c in doc) for r in doc["all_reduce"]["want_rx"])
    assert _min_pkts(_counters(guest, "verify")) >= want_bytes / MAX_MTU


@pytest.mark.parametrize(("coll", "per_rank"), [("all_reduce", 1.0), ("all_to_all", 0.5)])
def test_bench_over_rdma(guest: GuestResult, coll: str, per_rank: float) -> None:
    out = _ok(guest, f"bench_{coll}")
    print(out.splitlines()[0])
    rows = _json_tail(out)["rows"]
    for r in rows:
        print(f"{coll} {r['size']} B: p50 {r['time_p50_s'] * 1e3:.2f} ms, busbw"
              f" {r['busbw_Bps'] / 1e6:.2f} MB/s over {r['iterations']} iterations")  # fmt: skip
    assert [r["size"] for r in rows] == list(SIZES)
    assert all(r["iterations"] == ITERS and r["time_p50_s"] > 0 for r in rows)
    # a ring all-reduce of S bytes on 2 ranks sends S per rank, all-to-all S / 2
    sent = sum(SIZES) * per_rank * (ITERS + WARMUP)  # by each rank, on its own device
    assert _min_pkts(_counters(guest, f"bench_{coll}")) >= sent / MAX_MTU


def test_emulate_over_rdma(guest: GuestResult) -> None:
    out = _ok(guest, "emulate")
    print(out.splitlines()[0])
    (coll,) = _json_tail(out)["collectives"]  # one gradient bucket: one distinct all-reduce
    print(f"emulate: {coll['collective']} {coll['size']} B measured {coll['measured_s']}")
    assert coll["collective"] == "all_reduce" and coll["size"] == DP_BYTES
    assert len(coll["measured_s"]) == EMULATE_ITERS and coll["measured_p50_s"] > 0
    sent = DP_BYTES * (EMULATE_ITERS + EMULATE_WARMUP)  # by each rank, on its own device
    assert _min_pkts(_counters(guest, "emulate")) >= sent / MAX_MTU  # not on TCP


def test_everything_comes_down(guest: GuestResult) -> None:
    out = _ok(guest, "down")
    assert out.splitlines() == ["removed 2 genie-rxe* link(s)"], out


if __name__ == "__main__":  # in the guest: python -m tests.test_guest_rdma verify ...
    if len(sys.argv) != 5 or sys.argv[1] != "verify":
        sys.exit("usage: python -m tests.test_guest_rdma verify TESTBED SIZE ITERS")
    sys.exit(verify_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
