"""CPU time of ``genie simulate``'s stages after loading: replays, report and output.

Runs ``genie -q simulate ARGS`` in this process with timers around the stages it names
(``genie.api.simulation``'s replays and trace facts, the orbit checks, the report's rows, the
JSON document and its writing, the text tables), stdout to /dev/null, and prints each stage's
CPU time (user + system of this process, ``time.process_time``) in seconds, the sum of the
top-level stages (``replay_perturbed``, ``_line_rate``, ``trace_facts``, ``to_dict``,
``dump_json``, ``render``; the others are inside them) and the whole command's CPU time.
Stages a tree lacks are left out, so an older tree runs it too (``PYTHONPATH=TREE``). The
machine is shared: run A/B interleaved and take the best of several.

    python bench/sim_stages.py /tmp/genie-w/l4096 --json --rows 0
    python bench/sim_stages.py /tmp/genie-w/l4096 --rows 20
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

TOP = ("replay_perturbed", "_line_rate", "trace_facts", "to_dict", "dump_json", "render")


def timed(spent: dict[str, float], owner: Any, name: str, label: str | None = None) -> None:
    """Wrap ``owner.name`` so its CPU seconds add up in ``spent[label or name]``."""
    f = getattr(owner, name, None)
    if f is None:
        return
    key = label or name

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            spent[key] = spent.get(key, 0.0) + time.process_time() - t0

    setattr(owner, name, wrapper)


def stages(argv: list[str]) -> tuple[dict[str, float], float]:
    """Run ``genie -q simulate *argv`` with the timers; (CPU s per stage, whole CPU s)."""
    import genie.api.simulation as sim
    import genie.commands._sim_output as out
    import genie.commands.simulate as cmd
    import genie.sim.api as sim_api
    import genie.sim.orbits as orbits
    import genie.sim.report as report
    from genie.cli import main

    spent: dict[str, float] = {}
    wraps: list[tuple[Any, str, str | None]] = [
        (sim, "replay_perturbed", None),
        (sim, "_line_rate", None),
        (sim, "trace_facts", None),
        (sim.Simulation, "to_dict", None),
        (out, "dump_json", None),
        (cmd, "render", None),
        (orbits, "find_orbits", None),
        (orbits, "check_pricing", None),
        (orbits, "link_permutation", None),
        (sim_api, "simulate", "engine (with its orbit checks)"),
        (sim_api, "build_report", None),
        (report, "collective_rows", None),
    ]
    for owner, name, label in wraps:
        timed(spent, owner, name, label)
    t0 = time.process_time()
    saved = sys.stdout
    with open(os.devnull, "w") as sink:
        sys.stdout = sink
        try:
            main(["-q", "simulate", *argv])
        except SystemExit:
            pass
        finally:
            sys.stdout = saved
    return spent, time.process_time() - t0


def report_line(spent: dict[str, float], whole: float, fmt: Callable[[float], str]) -> str:
    """One line: each stage's CPU, the top-level stages' sum and the whole command's."""
    parts = [f"{k} {fmt(v)}" for k, v in spent.items()]
    top = sum(v for k, v in spent.items() if k in TOP)
    return "; ".join(parts) + f"; stages {fmt(top)}; whole command {fmt(whole)}"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    spent, whole = stages(sys.argv[1:])
    print(report_line(spent, whole, lambda s: f"{s:.3f} s CPU"))
