"""Diagnostics: `genie -v` shows timestamped controller lines; default output shows none."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from genie.controller.local import LocalCluster

STAMP = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} INFO genie\.controller\.session: ", re.M)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster.start(2, tmp_path_factory.mktemp("cl")) as cl:
        yield cl


def _bench(cluster, tmp_path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "genie", *flags, "bench", "--testbed", str(cluster.testbed_path)]
    cmd += ["--sizes", "4KiB", "--iters", "2", "--warmup", "0", "--no-store"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_verbose_shows_timestamped_controller_lines(cluster, tmp_path) -> None:
    out = _bench(cluster, tmp_path, "-v")
    assert out.returncode == 0, out.stderr
    lines = STAMP.findall(out.stderr)
    assert len(lines) >= 4, out.stderr  # hello and clock offset of each of two agents
    assert "clock of h0: offset" in out.stderr and "agent h1: genie" in out.stderr
    assert "size (B)" in out.stdout  # the table is unchanged on stdout


def test_default_output_has_no_diagnostics(cluster, tmp_path) -> None:
    out = _bench(cluster, tmp_path)
    assert out.returncode == 0, out.stderr
    assert not STAMP.search(out.stderr)
    assert "INFO" not in out.stderr and "size (B)" in out.stdout


def test_agent_log_lines_carry_timestamps(cluster) -> None:
    text = (cluster.dir / "agent-h0.log").read_text()
    assert re.search(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} genie-agent h0: listening on", text, re.M
    )
