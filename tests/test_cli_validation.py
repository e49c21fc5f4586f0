"""Every CLI number is checked when it is parsed: one line, exit 2, before any work starts."""

from __future__ import annotations

import time

import pytest

from genie.cli import main

TB = "testbed/loopback.toml"

BAD = [
    (["bench", "--testbed", TB, "--timeout-margin", "nan"], "--timeout-margin"),
    (["bench", "--testbed", TB, "--timeout-margin", "inf"], "--timeout-margin"),
    (["bench", "--testbed", TB, "--sizes", "1:1TiB:+1"], "at most 10000"),
    (["bench", "--testbed", TB, "--sizes", "1:64MiB:+1"], "at most 10000"),
    (["bench", "--testbed", TB, "--sndbuf", "1TiB"], "--sndbuf"),
    (["bench", "--testbed", TB, "--iters", "0"], "--iters"),
    (["bench", "--testbed", TB, "--chunks", "100000"], "--chunks"),
    (["bench", "--testbed", TB, "--slow-rate", "160"], "needs a unit"),
    (["workload", "generate", "llm", "--ranks", str(2**40), "--out", "/tmp/x"], "--ranks"),
    (
        ["workload", "generate", "dp", "--ranks", "4", "--out", "/tmp/x", "--bucket", "0"],
        "--bucket",
    ),
    (
        ["workload", "generate", "dp", "--ranks", "4", "--out", "/tmp/x", "--efficiency", "2"],
        "--eff",
    ),
    (["simulate", "x", "--bandwidth", "400"], "needs a unit"),
    (["simulate", "x", "--latency", "nan"], "--latency"),
    (["simulate", "x", "--oversubscription", "2:0"], "--oversubscription"),
    (["simulate", "x", "--peak-flops", "-1"], "--peak-flops"),
    (["simulate", "x", "--headers", "tcp", "--mtu", "100"], "--mtu"),
    (["simulate", "x", "--headers", "ib"], "--headers"),
    (
        ["collective", "show", "--type", "all_reduce", "--ranks", "1000000", "--size", "1"],
        "--ranks",
    ),
    (["emulate", "x", "--testbed", TB, "--iterations", "-1"], "--iterations"),
    (["cluster", "local", "--agents", "100000"], "--agents"),
]


@pytest.mark.parametrize("argv,what", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD])
def test_bad_numbers_are_one_line_exit_2(argv, what, capsys):
    t0 = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("genie: error: argument") and what in err[0], err[0]
    assert "Traceback" not in err[0]
    assert time.monotonic() - t0 < 5  # refused at parse time, nothing built


def test_oversubscription_on_the_cli_takes_a_ratio_like_the_files(tmp_path, capsys):
    prefix = tmp_path / "dp"
    assert main(["workload", "generate", "dp", "--ranks", "4", "--out", str(prefix)]) == 0
    capsys.readouterr()
    common = ["simulate", str(prefix), "--topology", "leaf_spine", "--bandwidth", "100gbit"]
    common += ["--ranks-per-host", "1", "--json"]
    assert main([*common, "--oversubscription", "2:1"]) == 0
    a = capsys.readouterr().out
    assert main([*common, "--oversubscription", "2"]) == 0
    b = capsys.readouterr().out
    import json

    ta = json.loads(a)["reports"][0]["iteration_s"]
    tb = json.loads(b)["reports"][0]["iteration_s"]
    assert ta == tb


def test_help_shows_defaults(capsys):
    assert main(["workload", "generate", "dp", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 25MiB)" in out and "(default: 12)" in out
    assert main(["bench", "--help"]) == 0
    assert "(default: 20)" in " ".join(capsys.readouterr().out.split())
