"""``genie workload inspect|convert|generate`` end to end, including exit codes for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genie.cli import main
from genie.workload import load_workload
from genie.workload.et_codec import write_trace
from genie.workload.model import Metadata, Node

REPO = Path(__file__).resolve().parent.parent


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


def test_inspect_json(tmp_path: Path, capsys) -> None:
    out = tmp_path / "llm"
    assert (
        main(
            [
                "workload",
                "generate",
                "llm",
                "--ranks",
                "8",
                "--tp",
                "2",
                "--pp",
                "2",
                "--layers",
                "4",
                "--zero",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["workload", "inspect", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
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
        assert main(["workload", "convert", str(f), str(js)]) == 0
        doc = json.loads(js.read_text())
        assert doc["ranks"][0]["nodes"][0]["type"] == "COMM_COLL_NODE"
        assert main(["workload", "convert", str(js), str(back)]) == 0
        assert back.read_bytes() == f.read_bytes()


@pytest.mark.parametrize("kind", ["llm", "moe", "microbench"])
def test_convert_whole_workload_round_trip(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "a" / kind
    assert main(["workload", "generate", kind, "--ranks", "4", "--out", str(src)]) == 0
    js = tmp_path / f"{kind}.json"
    assert main(["workload", "convert", str(src), str(js)]) == 0
    dst = tmp_path / "b" / kind
    assert main(["workload", "convert", str(js), str(dst)]) == 0
    for f in sorted((tmp_path / "a").iterdir()):
        assert (tmp_path / "b" / f.name).read_bytes() == f.read_bytes(), f.name
    assert load_workload(dst).groups == load_workload(src).groups


def test_convert_rejects_bad_json(tmp_path: Path, capsys) -> None:
    js = tmp_path / "bad.json"
    js.write_text("{not json")
    assert main(["workload", "convert", str(js), str(tmp_path / "o")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
