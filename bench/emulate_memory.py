"""How much memory do agents need to run a training step's communication, and do they give it back?

For each generated workload, start local agents on loopback, run the default ``genie.emulate``
(overlapped) once, sample every agent's resident set size (RSS) every 20 ms with psutil, and
print per workload: instances, ranks per agent, whether emulate ran (or its one-line refusal),
its wall time, the agents' RSS before, at peak and after the job (MB = 10^6 bytes; max over
agents). Measured on this machine, loopback TCP; nothing is shaped.

    .venv/bin/python bench/emulate_memory.py                     # every case
    .venv/bin/python bench/emulate_memory.py dp8rr --iterations 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import genie  # noqa: E402
from genie.controller.local import LocalCluster  # noqa: E402
from genie.errors import GenieError  # noqa: E402
from genie.sim.adapter import compile_workload  # noqa: E402

MB = 1e6

# case: (generator spec, agents, ranks per agent, placement)
CASES: dict[str, tuple[Callable[[], object], int, int, str]] = {
    "llm16": (lambda: genie.Transformer(ranks=16), 4, 4, "testbed"),
    "llm8": (lambda: genie.Transformer(ranks=8, tp=2, pp=2), 4, 2, "testbed"),
    "dp4": (lambda: genie.DataParallel(ranks=4), 4, 1, "testbed"),
    "dp8rr": (lambda: genie.DataParallel(ranks=8), 4, 2, "round-robin"),
    # a lab's shape: 8 servers of 8 GPUs, GPT with tp 8, pp 2, dp 4, 8 layers, 4 micro-batches
    "gpt64": (
        lambda: genie.Transformer(ranks=64, tp=8, pp=2, layers=8, micro_batches=4),
        8,
        8,
        "testbed",
    ),
}


class RssSampler:
    """Samples the RSS of some processes until stopped; keeps each one's maximum (bytes)."""

    def __init__(self, pids: list[int], period_s: float = 0.02) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self.period_s = period_s
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def now(self) -> list[int]:
        """Every process's RSS now (bytes; 0 for one that is gone)."""
        out = []
        for p in self.procs:
            try:
                out.append(p.memory_info().rss)
            except psutil.Error:
                out.append(0)
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = [max(a, b) for a, b in zip(self.peak, self.now(), strict=True)]
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def run_case(name: str, iterations: int, d: Path) -> str:
    """One case on fresh agents; its row of the table."""
    make, agents, per_agent, placement = CASES[name]
    gen = genie.generate(make())  # type: ignore[arg-type]  # as `genie workload generate`
    prefix = d / name / "wl"
    genie.save_workload(gen.workload, prefix)
    n_inst = len(compile_workload(gen.workload).instances)
    with LocalCluster.start(agents, d / name / "cluster", ranks_per_host=per_agent) as cl:
        pids = [p.pid for p in cl.procs]
        with RssSampler(pids) as rss:
            time.sleep(0.3)
            before = rss.now()
            t0 = time.monotonic()
            try:
                genie.emulate(
                    genie.EmulateSpec(
                        workload=str(prefix),
                        testbed=str(cl.testbed_path),
                        placement=placement,
                        iterations=iterations,
                        warmup=1,
                        calibration="none",
                        store=None,
                        command="bench/emulate_memory.py",
                    )
                )
                what = "ran"
            except GenieError as exc:
                what = f"refused: {str(exc)[:90]}"
            took = time.monotonic() - t0
            time.sleep(1.0)
            after = rss.now()
            peak = rss.peak
    return (
        f"{name:6} {n_inst:6} instances {agents}x{per_agent:<2} {took:6.1f} s  RSS before "
        f"{max(before) / MB:6.0f} peak {max(peak) / MB:6.0f} after {max(after) / MB:6.0f} MB  "
        f"{what}"
    )


def main(argv: list[str] | None = None) -> int:
    """Print one row per case."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help=f"some of {', '.join(CASES)} (default: all)")
    ap.add_argument("--iterations", type=int, default=1, help="measured runs of the step")
    a = ap.parse_args(argv)
    wanted = a.cases or list(CASES)
    with tempfile.TemporaryDirectory(prefix="genie-mem-") as tmp:
        for name in wanted:
            print(run_case(name, a.iterations, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
