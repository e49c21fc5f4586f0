"""The QEMU guest harness (tests/guest.py): netem and rdma_rxe load in the guest, a netem
delay shows in ping's RTT between two namespaces, and a failing step's exit status and output
come back. One boot for the module; skipped where no guest can run."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.guest import GuestError, GuestResult, guest_unavailable, run_in_guest, run_steps_in_guest

pytestmark = pytest.mark.slow

# two namespaces joined by a veth, netem delaying 2 ms on each end: 4 ms RTT; traffic only
# between them (198.18.0.0/15), inside the guest
PING = r"""
set -e
ping_rtt() { ip netns exec genie-gt-a ping -n -q -c 20 -i 0.05 -W 2 198.18.0.2 | tail -n 1; }
modprobe sch_netem
ip netns add genie-gt-a
ip netns add genie-gt-b
ip link add genie-gt-va netns genie-gt-a type veth peer name genie-gt-vb netns genie-gt-b
ip -n genie-gt-a addr add 198.18.0.1/30 dev genie-gt-va
ip -n genie-gt-b addr add 198.18.0.2/30 dev genie-gt-vb
ip -n genie-gt-a link set genie-gt-va up
ip -n genie-gt-b link set genie-gt-vb up
echo "plain $(ping_rtt)"
tc -n genie-gt-a qdisc add dev genie-gt-va root netem delay 2ms
tc -n genie-gt-b qdisc add dev genie-gt-vb root netem delay 2ms
tc -n genie-gt-a qdisc show dev genie-gt-va
echo "netem $(ping_rtt)"
ip netns del genie-gt-a
ip netns del genie-gt-b
"""

RXE = r"""
modprobe rdma_rxe
rc=$?
grep -w '^rdma_rxe' /proc/modules
# recorded, not required: an rxe device on a veth
ip link add genie-gt-rx0 type veth peer name genie-gt-rx1 && ip link set genie-gt-rx0 up
rdma link add genie-gt-rxe0 type rxe netdev genie-gt-rx0 && rdma link show
exit $rc
"""

STEPS = {
    "netem": PING,
    "rxe": RXE,
    "python": '.venv/bin/python -c "import sys, genie; print(sys.prefix)"',
    "fails": 'echo "to stdout"; echo "to stderr" >&2; echo kept > "$GENIE_GUEST_OUT/left"; exit 7',
    "after": "echo still runs",
}


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> GuestResult:
    """One guest boot running every step of this module."""
    reason = guest_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("genie-guest-out")
    res = run_steps_in_guest(STEPS, timeout_s=240, out_dir=out)
    print(f"guest: booted in {res.boot_s:.1f}s, whole run {res.wall_s:.1f}s")
    return res


def _rtt_ms(line: str) -> tuple[float, float]:
    """(min, avg) of ping's summary line 'rtt min/avg/max/mdev = a/b/c/d ms'."""
    m = re.search(r"= ([\d.]+)/([\d.]+)/[\d.]+/[\d.]+ ms", line)
    assert m, f"no RTT summary in {line!r}"
    return float(m[1]), float(m[2])


def test_netem_delay_shows_in_rtt(guest: GuestResult) -> None:
    if shutil.which("ping") is None:
        pytest.skip("no ping on this machine (apt-get install iputils-ping)")
    step = guest.step("netem")
    assert step.rc == 0, step.stderr
    assert "delay 2ms" in step.stdout
    lines = dict(line.split(" ", 1) for line in step.stdout.splitlines() if " " in line)
    plain_min, _ = _rtt_ms(lines.get("plain", step.stdout))
    netem_min, netem_avg = _rtt_ms(lines.get("netem", step.stdout))
    print(f"RTT plain min {plain_min} ms, with netem 2ms each way min {netem_min} avg {netem_avg}")
    assert 3.5 <= netem_min <= netem_avg <= 12.0
    assert netem_min - plain_min >= 3.0  # the delay is netem's, not the emulated CPU's


def test_rdma_rxe_loads(guest: GuestResult) -> None:
    step = guest.step("rxe")
    print(f"rdma_rxe in the guest: rc {step.rc}\n{step.stdout}{step.stderr}")
    assert step.rc == 0, step.stderr
    assert step.stdout.startswith("rdma_rxe ")


def test_checkout_venv_runs_in_guest(guest: GuestResult) -> None:
    step = guest.step("python")
    assert step.rc == 0, step.stderr
    assert Path(step.stdout.strip()).name == ".venv"


def test_failing_step_reports_rc_and_output(guest: GuestResult) -> None:
    step = guest.step("fails")
    assert (step.rc, step.stdout, step.stderr) == (7, "to stdout\n", "to stderr\n")
    assert guest.out_dir is not None
    assert (guest.out_dir / "left").read_text() == "kept\n"
    assert guest.step("after").stdout == "still runs\n"
    assert "genie-guest: step fails rc 7" in guest.stderr


def test_hard_timeout_kills_qemu_and_says_so() -> None:
    reason = guest_unavailable()
    if reason:
        pytest.skip(reason)
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("genie-guest-*"))
    with pytest.raises(GuestError, match=r"never reported .* of 2s"):
        run_in_guest("echo never", timeout_s=2)
    assert set(tmp.glob("genie-guest-*")) <= before
