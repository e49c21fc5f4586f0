"""``genie collective show`` and ``list``: what they print and how they fail."""

from __future__ import annotations

import re

from genie.cli import main
from genie.vocabulary import closed_form


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_show_ring_all_reduce(capsys):
    rc, out, _ = _run(
        capsys, "collective", "show", "--type", "all_reduce", "--algo", "ring", "--ranks", "8",
        "--size", "64MiB", "--chunks", "4",
    )  # fmt: skip
    assert rc == 0
    assert "all_reduce / ring on 8 ranks" in out
    assert "steps per rank" in out and "bytes per link" in out
    # 2(n-1) sends per chunk, 4 chunks; each rank sends 2(n-1)/n of the buffer
    assert re.search(r"│ 0\s+│ 168\s+│ 56\s+│ 56\s+│ 28\s+│ 28\s+│ 117440512\s+│", out)
    assert "h0->sw0" in out
    t = float(re.search(r"modeled time ([0-9.]+) ms", out).group(1))
    # 4 pipelined chunks: the link's bytes plus one latency (chunks hide the others)
    # genie's default link (as genie simulate's): 50 GiB/s, 500 ns per link, 2 hops on a switch
    assert "genie's default link, as genie simulate's" in " ".join(out.split())
    expect = closed_form("all_reduce", "ring", 8, 64 << 20, 50 * 2**30, 1e-6, chunks=4) * 1e3
    assert abs(t - expect) < 1e-3
    m = re.search(r"algbw ([0-9.]+) GB/s, busbw ([0-9.]+) GB/s \(GB = 10\^9 bytes", out)
    algbw, busbw = float(m.group(1)), float(m.group(2))
    assert abs(busbw - algbw * 14 / 8) < 2e-3


def test_show_steps_lists_every_step_of_a_rank(capsys):
    rc, out, _ = _run(
        capsys, "collective", "show", "--type", "broadcast", "--ranks", "4", "--size", "1000",
        "--steps", "--rank", "0",
    )  # fmt: skip
    assert rc == 0
    lines = [ln for ln in out.splitlines() if re.match(r"\s+\d+\s+c0 t0\s+SEND", ln)]
    assert len(lines) == 2  # root of a binomial tree of 4 sends twice
    assert "to 2" in lines[0] and "to 1" in lines[1]


def test_show_other_topologies_and_hierarchical(capsys):
    for topo in ("ring", "fully_connected", "leaf_spine"):
        rc, out, _ = _run(
            capsys, "collective", "show", "--type", "all_gather", "--algo", "halvingDoubling",
            "--ranks", "8", "--size", "1MiB", "--topology", topo,
        )  # fmt: skip
        assert rc == 0 and "modeled time" in out
    rc, out, _ = _run(
        capsys, "collective", "show", "--type", "all_reduce", "--algo", "hierarchical",
        "--ranks", "8", "--ranks-per-host", "4", "--size", "1MiB", "--intra-bandwidth", "800gbit",
    )  # fmt: skip
    assert rc == 0 and "(4 per host)" in out
    assert "intra-host 0 B" not in out


def test_bad_input_is_one_line_error(capsys):
    rc, _, err = _run(
        capsys, "collective", "show", "--type", "all_reduce", "--algo", "pairwise", "--ranks", "4",
        "--size", "1MiB",
    )  # fmt: skip
    assert rc == 2 and err.startswith("genie: error: no algorithm 'pairwise' for all_reduce")
    rc, _, err = _run(
        capsys, "collective", "show", "--type", "all_reduce", "--ranks", "4", "--size", "1XB"
    )
    assert rc == 2 and "not a size" in err and len(err.strip().splitlines()) == 1


def test_list(capsys):
    rc, out, _ = _run(capsys, "collective", "list")
    assert rc == 0
    assert re.search(r"all_reduce\s+ring\* direct halvingDoubling doubleBinaryTree", out)
