"""``genie simulate`` start-up (issue 33): genie's own model loads no module it does not use.

A 64-rank simulate is start-up bound (imports are most of its CPU time), so what the simulate
path imports is checked in a fresh interpreter, for the JSON document and for the text report a
user reads: not ASTRA-sim's backend nor its files' reader (loaded where ``--model astra-*`` or
``--astra-network`` asks), not the measured backend, the testbed package (``--testbed``,
``--headers``), the live path, plotting or ZeroMQ, not ``pkgutil`` (the full command tree's
scan) and not OpenSSL (hashlib's ``_hashlib``; the compiled form's signature takes blake2b from
``_blake2``), not the run store (``genie.store``, ``sqlite3``: ``genie.api.specs`` keeps its
default path), not ``genie.api.astra`` (read where ASTRA-sim's model, files or ``--comm-group``
are given), not the Chakra JSON reader (``.et`` files need neither it nor the feeder form's) and,
for ``--json``, not ``rich``; while the run itself still works and what those options ask for
still loads and runs. ``bench/sim_startup.py`` prints the CPU figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from genie.cli import main

PROBE = """
import io, json, sys, contextlib
from genie.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(sys.argv[1:])
loaded = [m for m in sys.modules if m in MODULES or m.split(".")[0] in MODULES]
print(json.dumps({"rc": rc, "out": out.getvalue(), "loaded": sorted(loaded)}))
"""
# what a small simulate on genie's own model must not load (a name or a top-level package)
UNUSED = (
    "genie.sim.astra_model",
    "genie.sim.astra_events",
    "genie.sim.astra_plan",
    "genie.sim.astra_config",
    "genie.sim.astra_mirror",
    "genie.sim.measured",
    "genie.testbed",
    "genie.testbed.to_topology",
    "genie.controller",
    "genie.live",
    "genie.report",
    "genie.capture",
    "matplotlib",
    "zmq",
    "pkgutil",
    "_hashlib",
    "genie.store",
    "sqlite3",
    "genie.api.astra",
    "genie.workload.chakra_json_reader",
    "genie.workload.feeder_json",
    "numpy.ma",  # np.unique without indices loads it (~9 ms): genie asks for distinct values
)
# and, where only the JSON document is printed, no table library either
UNUSED_BY_JSON = ("rich",)


def _workload(tmp_path: Path) -> Path:
    prefix = tmp_path / "w"
    assert main(["-q", "workload", "generate", "dp", "--ranks", "4", "--out", str(prefix)]) == 0
    return prefix


def _probe(*argv: str, json_out: bool = True) -> dict:
    """Run ``genie -q simulate ARGV`` in a fresh interpreter: its exit code, its output (and,
    with ``json_out``, the first report's iteration time) and the ``UNUSED`` modules it loaded."""
    code = f"MODULES = {(*UNUSED, *UNUSED_BY_JSON)!r}\n" + PROBE
    more = ["--json"] if json_out else []
    r = subprocess.run(
        [sys.executable, "-c", code, "-q", "simulate", *argv, *more],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if json_out:
        got["iteration_s"] = json.loads(got["out"])["reports"][0]["iteration_s"]
    return got


def test_genies_model_imports_neither_astra_sims_backend_nor_openssl(tmp_path: Path) -> None:
    got = _probe(str(_workload(tmp_path)))
    assert got["rc"] == 0 and got["iteration_s"] > 0
    assert got["loaded"] == []


def test_the_text_report_loads_no_heavy_module_either(tmp_path: Path) -> None:
    got = _probe(str(_workload(tmp_path)), json_out=False)
    assert got["rc"] == 0 and "analytical" in got["out"] and "iteration" in got["out"]
    assert "rich" in got["loaded"]  # its tables: what the text report is made of
    assert [m for m in got["loaded"] if m.split(".")[0] != "rich"] == []


def test_the_text_report_prints_names_as_written(tmp_path: Path) -> None:
    prefix = tmp_path / "job:smile:"  # rich would print an emoji for ``:smile:``
    assert main(["-q", "workload", "generate", "dp", "--ranks", "4", "--out", str(prefix)]) == 0
    got = _probe(str(prefix), json_out=False)
    assert got["rc"] == 0 and "workload job:smile:" in got["out"]
    assert "rich._emoji_codes" not in got["loaded"]  # its table of codes is not even loaded


def test_the_default_store_is_the_run_stores() -> None:
    from genie.api.specs import DEFAULT_STORE, EmulateSpec
    from genie.store import DEFAULT_STORE as STORES

    assert DEFAULT_STORE == STORES
    assert EmulateSpec(testbed="t.toml").store == STORES


def test_a_chakra_json_trace_still_loads_its_reader() -> None:
    from genie.workload.model import NodeType

    text = (
        '{"version": "0.0.4"}'
        '{"id": "1", "name": "ar", "type": "COMM_COLL_NODE", "attr": ['
        '{"name": "comm_type", "int64Val": "0"}, {"name": "comm_size", "int64Val": "64"}]}'
    )
    code = (
        "import json, sys\n"
        "from genie.workload.chakra_json import decode_chakra_json\n"
        "assert 'genie.workload.chakra_json_reader' not in sys.modules\n"
        f"meta, nodes, problems = decode_chakra_json({text.encode()!r}, 'x.0.json')\n"
        "print(json.dumps([meta.version, [n.id for n in nodes], nodes[0].type, problems,"
        " 'genie.workload.chakra_json_reader' in sys.modules]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, ids, ntype, problems, loaded = json.loads(r.stdout)
    assert (version, ids, ntype, problems) == ("0.0.4", [1], NodeType.COMM_COLL_NODE, [])
    assert loaded  # the decoder module, loaded by the first JSON trace


def test_options_that_need_the_testbed_package_still_load_it(tmp_path: Path) -> None:
    got = _probe(str(_workload(tmp_path)), "--headers", "tcp")
    assert got["rc"] == 0 and got["iteration_s"] > 0
    assert "genie.testbed.to_topology" in got["loaded"]


def test_astra_files_on_genies_model_still_load_their_reader(tmp_path: Path) -> None:
    prefix = _workload(tmp_path)
    net = tmp_path / "net.yml"
    net.write_text(
        "topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
    )
    system = Path(__file__).parent / "data/astra/sys/ring_s1.json"
    got = _probe(str(prefix), "--astra-network", str(net), "--astra-system", str(system))
    assert got["rc"] == 0 and got["iteration_s"] > 0
    assert "genie.sim.astra_config" in got["loaded"] and "genie.api.astra" in got["loaded"]
    assert "genie.sim.astra_model" not in got["loaded"]


def test_astra_sims_model_still_loads_its_backend(tmp_path: Path) -> None:
    prefix = _workload(tmp_path)
    net = tmp_path / "net.yml"
    net.write_text(
        "topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
    )
    system = Path(__file__).parent / "data/astra/sys/ring_s1.json"
    got = _probe(
        str(prefix),
        "--model",
        "astra-unaware",
        "--astra-network",
        str(net),
        "--astra-system",
        str(system),
    )
    assert got["rc"] == 0 and got["iteration_s"] > 0
    assert "genie.sim.astra_model" in got["loaded"]


THREADS = """
import json, os, sys
from genie.cli import main, program
how = sys.argv.pop(1)
rc = program() if how == "program" else main(sys.argv[1:])
import numpy
print(json.dumps({"rc": rc, "threads": len(os.listdir("/proc/self/task")),
                  "openblas": os.environ.get("OPENBLAS_NUM_THREADS")}))
"""


def _threads(how: str, prefix: Path, env_more: dict[str, str]) -> dict:
    """``genie -q simulate PREFIX --json`` in a fresh interpreter, as the ``genie`` program
    (``how="program"``) or through the library's ``main``: the threads it then has."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")} | env_more
    r = subprocess.run(
        [sys.executable, "-c", THREADS, how, "-q", "simulate", str(prefix), "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_the_genie_program_runs_numpy_on_one_thread_unless_the_user_chose(tmp_path: Path) -> None:
    prefix = _workload(tmp_path)
    got = _threads("program", prefix, {})
    assert got["rc"] == 0 and got["openblas"] == "1"
    assert got["threads"] == 1  # numpy's BLAS started no pool of its own
    # a count the user set, for OpenBLAS or for any BLAS (OpenMP's), is left as it is
    chosen = _threads("program", prefix, {"OPENBLAS_NUM_THREADS": "2"})
    assert chosen["rc"] == 0 and chosen["openblas"] == "2"
    omp = _threads("program", prefix, {"OMP_NUM_THREADS": "2"})
    assert omp["rc"] == 0 and omp["openblas"] is None
    # the library's main (notebooks, tests, other programs) leaves the environment alone
    lib = _threads("main", prefix, {})
    assert lib["rc"] == 0 and lib["openblas"] is None
