"""ASTRA-sim 2.0 vs ``genie simulate --model astra-*`` vs genie's own model, per workload.

Run: ``.venv/bin/python bench/astra_table.py`` (a minute or two; ``--only dp8,moe8`` for some
workloads, ``--cases micro`` for the microbenchmarks too). It prints a Markdown table: the ASTRA-sim
figures come from ``tests/data/astra/reference.json`` (what ASTRA-sim 2.0's analytical binaries
printed for the network and system files beside it); genie's figures are computed now, by
``genie simulate PREFIX --model M --astra-network N.yml --astra-system S.json --json`` for
``M`` = astra-unaware, astra-aware and genie, on the same workloads (``genie workload generate``
with the arguments recorded in each case). Iteration times in ms; ratio = genie / ASTRA-sim.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

from genie.cli import main

REF = Path(__file__).resolve().parent.parent / "tests" / "data" / "astra"


def _genie(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    if rc != 0:
        raise SystemExit(f"genie {' '.join(argv)} failed ({rc})")
    return json.loads(out.getvalue())


def _workload(case: dict, tmp: Path, made: dict) -> str:
    w = case["workload"]
    key = json.dumps(w, sort_keys=True)
    if key not in made:
        d = tmp / f"w{len(made)}"
        if "generate" in w:
            argv = ["workload", "generate", *w["generate"], "--out", str(d / "wl")]
        else:
            t = w["collective"]
            argv = [
                "workload",
                "generate",
                "microbench",
                "--ranks",
                str(w["npus"]),
                "--types",
                t,
                "--sizes",
                str(w["bytes"]),
                "--out",
                str(d / "wl"),
            ]
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(argv) == 0
        made[key] = str(d / "wl")
    return made[key]


def main_() -> int:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma list of workload names (dp8, moe8, llm8, ...)")
    ap.add_argument("--cases", default="workload", help="case id prefix (workload, micro, ...)")
    a = ap.parse_args()
    cases = json.loads((REF / "reference.json").read_text())["cases"]
    cases = [c for c in cases if c["id"].startswith(a.cases)]
    if a.only:
        keep = set(a.only.split(","))
        cases = [c for c in cases if c["id"].split("/")[1] in keep]
    print(
        "| workload | network | system | ASTRA-sim unaware (ms) | astra-unaware (ms) | ratio "
        "| ASTRA-sim aware (ms) | astra-aware (ms) | ratio | genie (ms) "
        "| genie / ASTRA-sim unaware |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst, t0 = 1.0, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genie-astra-") as tmp:
        made: dict = {}
        for c in cases:
            prefix = _workload(c, Path(tmp), made)
            files = ["--astra-network", str(REF / c["network"])]
            files += ["--astra-system", str(REF / c["system"])]
            got = {}
            for model in ("astra-unaware", "astra-aware", "genie"):
                if model == "astra-aware" and "aware" not in c["astra_ns"]:
                    continue
                try:
                    doc = _genie(["simulate", prefix, "--model", model, *files, "--json"])
                except SystemExit:
                    continue  # genie's own model takes 1-D networks only
                got[model] = doc["reports"][0]["iteration_s"] * 1e3
            row = [c["id"].split("/")[1], Path(c["network"]).stem, Path(c["system"]).stem]
            for mode in ("unaware", "aware"):
                want = c["astra_ns"].get(mode)
                mine = got.get(f"astra-{mode}")
                if want is None or mine is None:
                    row += ["-", "-", "-"]
                    continue
                r = mine / (want * 1e-6)
                worst = r if abs(r - 1) > abs(worst - 1) else worst
                row += [f"{want * 1e-6:.3f}", f"{mine:.3f}", f"{r:.4f}"]
            g = got.get("genie")
            base = c["astra_ns"]["unaware"] * 1e-6
            row += [f"{g:.3f}", f"{g / base:.3f}"] if g is not None else ["-", "-"]
            print("| " + " | ".join(row) + " |", flush=True)
    print(
        f"\n{len(cases)} cases; worst astra-* ratio {worst:.6f} ({time.perf_counter() - t0:.0f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main_())
