"""No CLI input makes a traceback (issue 31 item 6 and its weaker points).

Every command that reads or writes files, or parses numbers, is run (in-process, through
``genie.cli.main``) with hostile values in each of those places: paths that cannot be written,
missing files, directories, JSON nested 100,000 deep, binary garbage, garbage TOML, empty files,
huge and odd numbers. A case passes when ``main`` returns (an exception escaping it is what
prints a traceback) with a one-line error. Before the fix 12 of the issue's 188 cases raised
FileNotFoundError, RecursionError, MemoryError, OverflowError, FileExistsError or
UnicodeDecodeError, and ``keys init --agents "../../../escape,h1"`` wrote outside its directory.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from genie import cli
from genie.store import RunStore


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "deepobj.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    (d / "garbage.bin").write_bytes(bytes(range(256)) * 64)
    (d / "garbage.toml").write_bytes(b"\xff\xfe\x00[[[testbed\n= = =\n")
    (d / "bad.toml").write_text("[testbed]\nname = 'x'\nkind = 'netns'\n[[[ nope\n")
    (d / "empty.json").write_text("")
    (d / "afile").write_text("x")
    (d / "dir").mkdir()
    return {
        "missing": str(d / "no" / "such" / "file.json"),
        "unwritable": "/proc/genie-nope/out.json",
        "dir": str(d / "dir"),
        "deep": str(d / "deep.json"),
        "deepobj": str(d / "deepobj.json"),
        "garbage": str(d / "garbage.bin"),
        "garbage_toml": str(d / "garbage.toml"),
        "bad_toml": str(d / "bad.toml"),
        "empty": str(d / "empty.json"),
        "afile": str(d / "afile"),
    }


NUMBERS = ["1e400", "-1e400", "nan", "inf", "-1", "0", "99999999999999999999999", "1e-400", "x"]

# commands whose inputs are read: {IN} an input file, {OUT} an output path, {N} a number
TEMPLATES = [
    "simulate {IN}",
    "simulate {IN} --trace {OUT}",
    "simulate {IN} --comm-group {IN}",
    "simulate {IN} --testbed {IN}",
    "workload inspect {IN}",
    "workload convert {IN} {OUT}",
    "report --out {OUT} --sim {IN}",
    "report --out {OUT} --trace {IN}",
    "runs list --store {IN}",
    "runs show r1 --store {IN}",
    "testbed show {IN}",
    "testbed plan {IN}",
    "hosts check --testbed {IN}",
    "bench --testbed {IN} --sizes 4096",
    "keys init --dir {OUT}",
    "collective show --type all_reduce --ranks 4 --size {N}",
    "collective show --type all_reduce --ranks {N} --size 4096",
]

INPUTS = ["missing", "dir", "deep", "deepobj", "garbage", "garbage_toml", "bad_toml", "empty"]
OUTPUTS = ["unwritable", "dir", "afile", "missing"]


def _cases(files: dict[str, str]) -> list[list[str]]:
    out: list[list[str]] = []
    for t in TEMPLATES:
        ins = INPUTS if "{IN}" in t else [""]
        outs = OUTPUTS if "{OUT}" in t else [""]
        nums = NUMBERS if "{N}" in t else [""]
        for i, o, n in itertools.product(ins, outs, nums):
            line = t.format(IN=files.get(i, ""), OUT=files.get(o, ""), N=n)
            out.append(line.split())
    return out


def _one(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = cli.main(argv)
    except BaseException as exc:  # escaping main: the CLI would print a traceback
        capsys.readouterr()
        return -1, f"{type(exc).__name__}: {exc}"[:300]
    _out, err = capsys.readouterr()
    return rc, err


def test_no_input_makes_a_traceback(files, capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    cases = _cases(files)
    tracebacks, multiline = [], []
    for argv in cases:
        rc, err = _one(argv, capsys)
        if rc == -1 or "Traceback" in err:
            tracebacks.append((" ".join(argv)[-120:], err))
        elif rc != 0 and len([ln for ln in err.splitlines() if ln.startswith("genie: ")]) != 1:
            multiline.append((" ".join(argv)[-120:], err[-300:]))
    print(f"\n{len(cases)} hostile CLI cases: {len(tracebacks)} tracebacks")
    assert not tracebacks, tracebacks[:5]
    assert not multiline, multiline[:5]


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "init", "--dir", "{d}/k", "--agents", "../../../escape,h1"],
        ["keys", "init", "--dir", "{d}/k", "--agents", "h1,../x"],
        ["keys", "init", "--dir", "{d}/k", "--agents", ""],
        ["keys", "init", "--dir", "{d}/k", "--agents", ","],
    ],
)
def test_keys_init_refuses_agent_names_that_are_paths(tmp_path, capsys, argv) -> None:
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    (tmp_path / "k" / "agent-..").mkdir(parents=True)  # a traversal would succeed
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "--agents" in err  # was: a traceback, or rc 0
    assert not list(tmp_path.glob("**/*escape*")) and not list(tmp_path.glob("**/x.secret"))
    assert not (tmp_path / "k" / "controller.secret").exists()  # refused before any key


def test_a_percent_is_no_wildcard_in_run_ids(tmp_path, capsys) -> None:
    store = tmp_path / "s.sqlite"
    with RunStore(store) as st:
        st.finish_run(st.start_run("x"))
    rc = cli.main(["runs", "show", "%", "--store", str(store)])
    err = capsys.readouterr().err
    assert rc != 0 and "no run '%'" in err  # was: the run shown
    rc = cli.main(["runs", "show", "r_", "--store", str(store)])
    assert rc != 0 and "no run 'r_'" in capsys.readouterr().err


def test_an_et_file_that_is_dev_zero_is_one_line(tmp_path) -> None:
    (tmp_path / "w.0.et").symlink_to("/dev/zero")
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from genie import cli; sys.exit(cli.main(sys.argv[1:]))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "workload", "inspect", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONFAULTHANDLER": ""},
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr[-500:]
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-500:]
