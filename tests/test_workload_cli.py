"""``genie workload inspect|convert|generate`` end to end, including exit codes for bad input.

What generation, inspection and conversion compute is checked through the library
(``genie.generate``, ``genie.workload.summarize``, ``genie.workload.conversion.convert``); the
CLI's own tests here check the quickstart commands, one-line errors and exit codes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import genie
from genie.cli import main
from genie.workload import load_workload, save_workload, summarize
from genie.workload.conversion import convert
from genie.workload.et_codec import write_trace
from genie.workload.model import Metadata, Node

REPO = Path(__file__).resolve().parent.parent
SWEEP = tuple(1024 * 4**k for k in range(8))  # the CLI's default sweep, 1KiB:16MiB:x4


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genie", *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def test_quickstart_commands(tmp_path: Path) -> None:
    out = tmp_path / "genie-demo" / "dp"
    r = run("workload", "generate", "dp", "--ranks", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == [f"dp.{i}.et" for i in range(4)]
    r = run("workload", "inspect", str(out))
    assert r.returncode == 0, r.stderr
    assert "4 ranks" in r.stdout and "ALL_REDUCE" in r.stdout and "critical path" in r.stdout
    assert "problems: none" in r.stdout


def test_bad_input_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    for r_ in (0, 2):
        write_trace(tmp_path / f"x.{r_}.et", Metadata(), [Node(0, "a", 4, duration_micros=1)])
    r = run("workload", "inspect", str(tmp_path / "x"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("genie: error: ")
    assert "missing for ranks [1]" in r.stderr and "Traceback" not in r.stderr


def test_corrupt_file_exit_code_in_process(tmp_path: Path, capsys) -> None:
    (tmp_path / "c.0.et").write_bytes(b"\x07\x0a\x050.0.4H\x05\x08")
    assert main(["workload", "inspect", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "byte offset 8" in err and "c.0.et" in err and err.count("\n") == 1


def test_generate_bad_parameters_exit_2(capsys) -> None:
    assert main(["workload", "generate", "llm", "--ranks", "6", "--out", "/tmp/x-none"]) == 2
    assert "multiple of tp x pp" in capsys.readouterr().err
    assert (
        main(
            [
                "workload",
                "generate",
                "microbench",
                "--ranks",
                "2",
                "--types",
                "bogus",
                "--out",
                "/tmp/x-none",
            ]
        )
        == 2
    )


def test_inspect_json(tmp_path: Path) -> None:
    out = tmp_path / "llm"
    gen = genie.generate(genie.Transformer(ranks=8, tp=2, pp=2, layers=4, zero=True))
    save_workload(gen.workload, out)
    s = summarize(load_workload(out))
    assert s["ranks"] == 8 and s["problems"] == []
    types = {c["type"] for c in s["collectives"]}
    assert types == {"ALL_REDUCE", "REDUCE_SCATTER", "ALL_GATHER"}
    assert s["nodes_by_kind"]["send"] == s["nodes_by_kind"]["recv"] > 0
    assert s["critical_path_s"] > 0 and s["compute_s_total"] >= s["compute_s_max_rank"]
    ag = next(c for c in s["collectives"] if c["type"] == "ALL_GATHER")
    rs = next(c for c in s["collectives"] if c["type"] == "REDUCE_SCATTER")
    assert ag["comm_size_bytes"] * 2 == rs["comm_size_bytes"]  # dp = 2: shard is half
    assert ag["comm_size_MiB"] == ag["comm_size_bytes"] / 2**20


def test_convert_sample_file_to_json_and_back_byte_exact(et_samples: Path, tmp_path: Path) -> None:
    for f in sorted(et_samples.rglob("*.0.et")):
        js = tmp_path / (f.stem + ".json")
        back = tmp_path / f.name
        convert(f, js)
        doc = json.loads(js.read_text())
        assert doc["ranks"][0]["nodes"][0]["type"] == "COMM_COLL_NODE"
        convert(js, back)
        assert back.read_bytes() == f.read_bytes()


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("llm", genie.Transformer(ranks=4)),
        ("moe", genie.MixtureOfExperts(ranks=4)),
        ("microbench", genie.Microbench(ranks=4, sizes=SWEEP)),
    ],
)
def test_convert_whole_workload_round_trip(tmp_path: Path, kind: str, spec) -> None:
    src = tmp_path / "a" / kind
    save_workload(genie.generate(spec).workload, src)
    js = tmp_path / f"{kind}.json"
    convert(src, js)
    dst = tmp_path / "b" / kind
    convert(js, dst)
    for f in sorted((tmp_path / "a").iterdir()):
        assert (tmp_path / "b" / f.name).read_bytes() == f.read_bytes(), f.name
    assert load_workload(dst).groups == load_workload(src).groups


def test_convert_rejects_bad_json(tmp_path: Path, capsys) -> None:
    js = tmp_path / "bad.json"
    js.write_text("{not json")
    assert main(["workload", "convert", str(js), str(tmp_path / "o")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
