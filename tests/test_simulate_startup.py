"""``genie simulate`` start-up (issue 33): genie's own model loads no module it does not use.

A 64-rank simulate is start-up bound (imports are most of its CPU time), so what the simulate
path imports is checked in a fresh interpreter: not ASTRA-sim's backend (loaded where ``--model
astra-*`` builds it) and not OpenSSL (hashlib's ``_hashlib``; the compiled form's signature
takes blake2b from ``_blake2``), while the run itself still works and ASTRA-sim's model, when
asked for, still loads and runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from genie.cli import main

PROBE = """
import io, json, sys, contextlib
from genie.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(sys.argv[1:])
doc = json.loads(out.getvalue())
print(json.dumps({"rc": rc, "iteration_s": doc["reports"][0]["iteration_s"],
                  "loaded": sorted(m for m in sys.modules if m in MODULES)}))
"""
UNUSED = ("genie.sim.astra_model", "genie.sim.astra_plan", "_hashlib")


def _workload(tmp_path: Path) -> Path:
    prefix = tmp_path / "w"
    assert main(["-q", "workload", "generate", "dp", "--ranks", "4", "--out", str(prefix)]) == 0
    return prefix


def _probe(*argv: str) -> dict:
    code = f"MODULES = {UNUSED!r}\n" + PROBE
    r = subprocess.run(
        [sys.executable, "-c", code, "-q", "simulate", *argv, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_genies_model_imports_neither_astra_sims_backend_nor_openssl(tmp_path: Path) -> None:
    got = _probe(str(_workload(tmp_path)))
    assert got["rc"] == 0 and got["iteration_s"] > 0
    assert got["loaded"] == []


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
