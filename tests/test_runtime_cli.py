"""The runtime's commands end to end: cluster local start/stop by pid, demo cleans up."""

from __future__ import annotations

import argparse
import os

import psutil
import pytest

from genie.commands import cluster, demo
from genie.controller.local import read_pids


def _cli(module, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def _alive(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def test_cluster_local_starts_writes_testbed_and_stops_by_pid(tmp_path, capsys) -> None:
    d = tmp_path / "cl"
    try:
        assert _cli(cluster, ["cluster", "local", "--agents", "3", "--dir", str(d)]) == 0
        pids = read_pids(d)
        assert len(pids) == 3 and len(_alive(pids)) == 3
        from genie.testbed import load_testbed

        tb = load_testbed(d / "testbed.toml")
        assert [h.name for h in tb.hosts] == ["h0", "h1", "h2"]
        assert len({h.control for h in tb.hosts}) == 3
        assert "genie bench --testbed" in capsys.readouterr().out
        # a second start in the same directory is refused while the first runs
        from genie.errors import TestbedError

        with pytest.raises(TestbedError, match="already running"):
            _cli(cluster, ["cluster", "local", "--agents", "1", "--dir", str(d)])
        assert _cli(cluster, ["cluster", "local", "--stop", "--dir", str(d)]) == 0
        assert _alive(pids) == [] and read_pids(d) == []
    finally:
        from genie.controller.local import stop_pids

        stop_pids(read_pids(d))


def test_demo_prints_the_step_and_the_table_and_leaves_no_agent_behind(tmp_path, capsys) -> None:
    before = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    store = tmp_path / "demo.sqlite"
    rc = _cli(demo, ["demo", "--agents", "3", "--iterations", "2", "--store", str(store)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "busbw GB/s" in out and "agents stopped" in out
    assert "times measured on the wire" in out and "analytical model, probed fabric" in out
    after = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    assert _alive(sorted(after - before)) == []
    from genie.store import RunStore

    with RunStore(store) as st:
        runs = st.list_runs()
        assert sorted(r.status for r in runs) == ["ok", "ok"]  # the step and the sweep
        assert all(r.instances > 0 for r in runs)
