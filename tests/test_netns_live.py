"""Real netns testbeds (root): a 3-host star with shaped links, a ring, rollback, agents.

Everything here uses the namespace prefix ``genie-pt-`` so it never touches a testbed a user
(or another test run) has up; every fixture removes what it built, even on failure.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from genie import cli
from genie.errors import TestbedError
from genie.testbed import Testbed, addressing, load_testbed, netns, state
from genie.testbed.measure import aggregate_rate, measure_flows
from tests.netns_helpers import unavailable

PREFIX = "genie-pt-"
RATE_BITS = 200_000_000


_WHY = unavailable(PREFIX)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def _write(tmp: Path, name: str, body: str) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(f'[testbed]\nname = "{name}"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n{body}')
    return p


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENIE_STATE_DIR", str(tmp_path / "genie-state"))


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Callable[[Testbed], Testbed]]:
    """Build testbeds on request; remove them (and anything under the prefix) afterwards."""
    made: list[Testbed] = []

    def build(tb: Testbed) -> Testbed:
        made.append(tb)
        netns.up(tb)
        return tb

    try:
        yield build
    finally:
        for tb in made:
            try:
                netns.down(tb)
            finally:
                netns.clean(prefix=PREFIX)


def _star3(tmp_path: Path) -> Testbed:
    body = f'[topology]\nshape = "star"\nhosts = 3\nrate = "{RATE_BITS}bit"\n'
    return load_testbed(_write(tmp_path, "pt-star3", body))


def _tc(ns: str, dev: str) -> str:
    return subprocess.run(
        ["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True
    ).stdout


def test_star_is_built_shaped_and_removed(tmp_path: Path, built) -> None:
    tb = built(_star3(tmp_path))
    assert set(netns.list_namespaces(prefix=PREFIX)) == {
        "genie-pt-h0", "genie-pt-h1", "genie-pt-h2", "genie-pt-sw0",
    }  # fmt: skip
    assert sorted(netns.list_root_links(prefix=PREFIX)) == [
        "genie-ptc0", "genie-ptc1", "genie-ptc2",
    ]  # fmt: skip
    assert "tbf" in _tc("genie-pt-h1", "eth0") and "rate 200Mbit" in _tc("genie-pt-h1", "eth0")
    assert "rate 200Mbit" in _tc("genie-pt-sw0", "p1")
    netns.down(tb)
    assert netns.list_namespaces(prefix=PREFIX) == []
    assert netns.list_root_links(prefix=PREFIX) == []


def test_shaped_link_limits_tcp_throughput(tmp_path: Path, built) -> None:
    tb = built(_star3(tmp_path))
    nbytes = RATE_BITS // 8  # about 1 s at the set rate
    (flow,) = measure_flows(tb, [("h0", "h2")], nbytes)
    rate = flow.rate
    ratio = rate * 8 / RATE_BITS
    assert 0.8 <= ratio <= 1.05, f"measured {rate * 8 / 1e6:.1f} Mbit/s on a 200 Mbit/s link"


def test_two_flows_into_one_host_share_its_switch_port(tmp_path: Path, built) -> None:
    tb = built(_star3(tmp_path))
    nbytes = RATE_BITS // 32  # both together: about 0.5 s at the set rate
    flows = measure_flows(tb, [("h0", "h2"), ("h1", "h2")], nbytes)
    rates = [f.rate * 8 / RATE_BITS for f in flows]
    assert all(r < 0.7 for r in rates), rates  # each gets about half of h2's port
    assert 0.8 <= aggregate_rate(flows) * 8 / RATE_BITS <= 1.05, rates


def test_ring_forwards_through_neighbours(tmp_path: Path, built) -> None:
    body = '[topology]\nshape = "ring"\nhosts = 4\nrate = "500mbit"\n'
    tb = built(load_testbed(_write(tmp_path, "pt-ring4", body)))
    nbytes = 16_000_000  # 0.26 s at 500 Mbit/s, so the 1 ms token buckets add well under 1 %
    (flow,) = measure_flows(tb, [("h0", "h2")], nbytes)  # two hops, via h1
    assert flow.bytes == nbytes and flow.rate * 8 < 500e6 * 1.05


def test_failed_command_rolls_back_a_real_build(tmp_path: Path) -> None:
    tb = _star3(tmp_path)

    def flaky(argv: Sequence[str], stdin: str | None) -> netns.Result:
        if "peer" in argv and "p1" in argv:
            return netns.Result(returncode=2, stdout="", stderr="injected failure")
        return netns.run_command(argv, stdin)

    try:
        with pytest.raises(TestbedError, match=r"injected failure.*rolled back"):
            netns.up(tb, runner=flaky)
        assert netns.list_namespaces(prefix=PREFIX) == []
        assert netns.list_root_links(prefix=PREFIX) == []
        assert state.load_all() == []
    finally:
        netns.clean(prefix=PREFIX)


def test_up_with_agents_then_down_stops_them(tmp_path: Path, capsys) -> None:
    if not Path(cli.__file__).with_name("commands").joinpath("agent.py").exists():
        pytest.skip("genie agent command not present")
    body = '[topology]\nshape = "star"\nhosts = 2\nrate = "1gbit"\n'
    path = _write(tmp_path, "pt-agents", body)
    tb = load_testbed(path)
    try:
        assert cli.main(["testbed", "up", str(path), "--agents"]) == 0
        out = capsys.readouterr().out
        assert "no delay or loss is emulated" in out
        (rec,) = [st for _, st in state.load_all() if st is not None]
        assert [a.host for a in rec.agents] == ["h0", "h1"]
        procs = [psutil.Process(a.pid) for a in rec.agents]
        assert all(p.is_running() for p in procs)
        log = Path(rec.agents[1].log)
        end = time.monotonic() + 5  # the agent binds its control socket before it logs
        control, data = tb.hosts[1].control, tb.hosts[1].data_addr  # the testbed's own block
        assert control == f"{addressing.control_pair(1, PREFIX)[1]}:7000"
        while data not in log.read_text() and time.monotonic() < end:
            time.sleep(0.02)
        assert control in log.read_text() and data in log.read_text()
        assert cli.main(["testbed", "status"]) == 0
        assert "2/2 agents alive" in capsys.readouterr().out
        assert cli.main(["testbed", "down", str(path)]) == 0
        _gone, alive = psutil.wait_procs(procs, timeout=5)
        assert not alive
        assert netns.list_namespaces(prefix=PREFIX) == []
    finally:
        try:
            netns.down(tb)
        finally:
            netns.clean(prefix=PREFIX)


def test_ring_all_reduce_over_the_shaped_star_moves_checked_bytes(tmp_path: Path, built) -> None:
    from genie.collectives import build_program
    from genie.collectives.program import Op
    from genie.controller.local import open_controller

    tb = built(_star3(tmp_path))
    netns.start_agents(tb)
    size = 3 * 2**20
    prog = build_program("all_reduce", "ring", 3, size)
    ctl = open_controller(tb)
    try:
        ctl.connect()
        ctl.sync_clocks(rounds=4)
        ctl.prepare([prog], [h.name for h in tb.hosts])
        out = ctl.run(iters=1)
        ctl.release()
    finally:
        ctl.close()
        ctl.t.close()
    ranks = {r.rank: r for res in out.results.values() for r in res.ranks}
    assert sorted(ranks) == [0, 1, 2]
    for rank, rr in ranks.items():
        recvs = [s for s in prog.steps(rank) if s.op == Op.RECV]
        assert rr.bytes_received == sum(s.nbytes for s in recvs)
        assert rr.messages_verified == len(recvs)
    # each rank sends 2(n-1)/n of the buffer through its 200 Mbit/s link: the emulated link,
    # not loopback speed, must bound the time
    floor = size * 2 * 2 / 3 / (RATE_BITS / 8)
    (t,) = out.times()
    assert floor * 0.95 <= t <= floor * 3, (t, floor)


def test_agents_that_cannot_start_are_reported_and_forgotten(tmp_path: Path, built) -> None:
    tb = built(_star3(tmp_path))
    with pytest.raises(TestbedError, match=r"agent h0 in genie-pt-h0 exited"):
        netns.start_agents(tb, timeout=5, python="/nonexistent/python")
    (rec,) = [st for _, st in state.load_all() if st is not None]
    assert rec.agents == []


def test_check_command_measures_every_neighbour_pair(tmp_path: Path, built, capsys) -> None:
    tb = built(_star3(tmp_path))
    path = tmp_path / "pt-star3.toml"
    assert load_testbed(path) == tb
    rc = cli.main(["testbed", "check", str(path), "--seconds", "0.3"])
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if " -> " in ln]
    assert [r.split("│")[1].strip() for r in rows] == ["h0 -> h1", "h1 -> h2", "h2 -> h0"]
    ratios = [float(r.split("│")[4]) for r in rows]
    assert all(0 < x <= 1.05 for x in ratios), ratios  # never above the set rate
    assert rc == (0 if min(ratios) >= 0.8 else 1)  # exit code says whether every link held up
    assert "200.0" in out and "no delay or loss is emulated" in out
