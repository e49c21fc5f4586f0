"""The layout's rules, checked on the source: the package layers, the purity promises, no cycles.

The layers, the scanner and the exact rules live in ``tests/_layers.py`` (its docstring says
what counts as an import, how ``TYPE_CHECKING`` imports and the top package's lazy facade over
``genie.api`` are treated). In short: a module imports its own package or packages of lower
layers; ``genie.sim``, ``genie_agent`` and ``genie.wire`` keep promises about everything they
reach, transitively; no import cycle crosses packages. The second half of the file proves the
checker fails: it plants forbidden imports in a copy of the tree and expects them named.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _layers import (
    LAYER_OF,
    Tree,
    cycle_evidence,
    facade_violations,
    layer_violations,
    package_cycles,
    package_of,
    reach_violations,
    runtime_graph,
    scan,
    unknown_packages,
)

ROOT = Path(__file__).resolve().parents[1]

SIM_MAY_NOT_REACH = (
    "genie.controller",
    "genie.store",
    "genie.live",
    "genie.commands",
    "genie.deploy",
    "genie.wire",
    "genie.testbed",
    "genie.calibration",
    "genie.api",
    "genie_agent",
)
AGENT_MAY_REACH = (
    "genie.wire",
    "genie.errors",
    "genie.collectives",  # step programs are what agents run
    "genie.vocabulary",
    "genie.keys",  # CURVE key files
    "genie",  # __version__
)
WIRE_MAY_REACH = ("genie.errors",)


@functools.cache
def _tree() -> Tree:
    tree = scan(ROOT)
    assert len(tree.modules) > 50, sorted(tree.modules)
    return tree


def _report(problems: list[str]) -> str:
    return "\n" + "\n".join(problems)


# -- the rules, on the tree ---------------------------------------------------------------------


def test_every_package_has_a_layer():
    problems = unknown_packages(_tree())
    assert not problems, _report(problems)


def test_imports_go_down_the_layers():
    problems = layer_violations(_tree())
    assert not problems, _report(problems)


def test_the_top_package_is_at_most_a_facade_over_the_api():
    problems = facade_violations(_tree())
    assert not problems, _report(problems)


def test_the_simulator_is_a_pure_model():
    problems = reach_violations(_tree(), "genie.sim", banned=SIM_MAY_NOT_REACH)
    assert not problems, _report(problems)


def test_agents_reach_only_the_wire_and_the_shared_vocabulary():
    problems = reach_violations(_tree(), "genie_agent", allowed=AGENT_MAY_REACH)
    assert not problems, _report(problems)


def test_the_wire_reaches_only_the_errors():
    problems = reach_violations(_tree(), "genie.wire", allowed=WIRE_MAY_REACH)
    assert not problems, _report(problems)


def test_agents_and_controller_meet_only_on_the_wire():
    """The controller side never runs agent code in its own process: it talks to agents."""
    problems = [
        p
        for side in ("genie.controller", "genie.live", "genie.deploy")
        for p in reach_violations(_tree(), side, banned=["genie_agent"])
    ]
    assert not problems, _report(problems)


def test_no_import_cycle_crosses_packages():
    tree = _tree()
    problems = [cycle_evidence(tree, c) for c in package_cycles(tree)]
    assert not problems, _report(problems)


# -- the scanner sees every kind of import ------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_scanner_sees_every_kind_of_import(tmp_path):
    _write(
        tmp_path,
        {
            "genie/__init__.py": "__version__ = '0'\n",
            **{f"genie/{m}.py": "" for m in ("errors", "units", "keys", "store", "extras")},
            "genie/commands/__init__.py": "",
            "genie/commands/run.py": "",
            "genie/sim/__init__.py": "from . import engine\nfrom .engine import step\n",
            "genie/sim/engine.py": (
                "import importlib\n"
                "from typing import TYPE_CHECKING\n"
                "import genie.errors\n"
                "from genie import __version__, units\n"
                "from ..store import Store\n"
                "if TYPE_CHECKING:\n"
                "    from genie.keys import Key\n"
                "def step(name):\n"
                "    from genie_agent.x import y\n"
                "    importlib.import_module('genie.extras')\n"
                "    return importlib.import_module(f'genie.commands.{name}')\n"
                "TABLE = {'a': 'genie_agent', 'b': 'numpy'}\n"
                "def lazy(key):\n"
                "    return importlib.import_module(TABLE[key])\n"
            ),
            "genie_agent/__init__.py": "",
            "genie_agent/x.py": "",
        },
    )
    tree = scan(tmp_path)
    got = {(e.src, e.target, e.line, e.type_only, e.any_child) for e in tree.edges}
    assert got == {
        ("genie.sim", "genie.sim.engine", 1, False, False),  # from . import (in __init__)
        ("genie.sim", "genie.sim.engine", 2, False, False),  # from .engine import name
        ("genie.sim.engine", "genie.errors", 3, False, False),
        ("genie.sim.engine", "genie", 4, False, False),  # __version__
        ("genie.sim.engine", "genie.units", 4, False, False),  # a submodule
        ("genie.sim.engine", "genie.store", 5, False, False),  # ..store
        ("genie.sim.engine", "genie.keys", 7, True, False),  # TYPE_CHECKING
        ("genie.sim.engine", "genie_agent.x", 9, False, False),  # inside a function
        ("genie.sim.engine", "genie.extras", 10, False, False),  # import_module literal
        ("genie.sim.engine", "genie.commands", 11, False, True),  # f-string prefix
        ("genie.sim.engine", "genie_agent", 14, False, False),  # a constant table's values
    }
    # What importing it runs: parents too, every module the f-string may name, not the
    # TYPE_CHECKING import.
    assert runtime_graph(tree)["genie.sim.engine"] == {
        "genie",
        "genie.sim",
        "genie.errors",
        "genie.units",
        "genie.store",
        "genie_agent",
        "genie_agent.x",
        "genie.extras",
        "genie.commands",
        "genie.commands.run",
    }
    assert reach_violations(tree, "genie.sim", banned=["genie.commands", "genie.keys"]) == [
        "genie.sim -> genie.sim.engine -> genie.commands (genie.sim may not reach genie.commands)",
        "genie.sim.engine -> genie.commands (genie.sim may not reach genie.commands)",
    ]


# -- the checker fails on planted mistakes (in a copy of the tree) ------------------------------


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for top in ("genie", "genie_agent"):
        shutil.copytree(ROOT / top, root / top, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _plant(tmp_path: Path, files: dict[str, str], append: bool = False) -> Tree:
    """A copy of the tree with ``files`` written (or appended to) in it, scanned."""
    root = _copy(tmp_path)
    for rel, text in files.items():
        path = root / rel
        old = path.read_text() if append and path.exists() else ""
        path.write_text(old + text)
    return scan(root)


def _new(check, planted: Tree) -> list[str]:
    """What ``check`` says of the planted copy and not of the real tree."""
    return sorted(set(check(planted)) - set(check(_tree())))


def _sim_reach(tree: Tree) -> list[str]:
    return reach_violations(tree, "genie.sim", banned=SIM_MAY_NOT_REACH)


def test_a_relative_import_upward_is_caught(tmp_path):
    tree = _plant(
        tmp_path, {"genie/sim/_probe.py": "def f():\n    from ..controller import session\n"}
    )
    target = next(e.target for e in tree.edges if e.src == "genie.sim._probe")
    assert target in ("genie.controller.session", "genie.controller")
    assert _new(layer_violations, tree) == [
        f"genie.sim._probe imports {target} (layer L8 may not import L7 package "
        f"genie.controller: a higher layer) at genie/sim/_probe.py:2"
    ]
    reached = _new(_sim_reach, tree)
    assert any(m.startswith("genie.sim._probe -> genie.controller") for m in reached), reached


def test_a_dynamic_import_is_caught(tmp_path):
    probe = 'import importlib\nSTORE = importlib.import_module("genie.store")\n'
    tree = _plant(tmp_path, {"genie/sim/_probe.py": probe})
    assert _new(layer_violations, tree) == [
        "genie.sim._probe imports genie.store (layer L8 may not import L8 package genie.store: "
        "the same layer) at genie/sim/_probe.py:2"
    ]
    assert "genie.sim._probe -> genie.store (genie.sim may not reach genie.store)" in _new(
        _sim_reach, tree
    )


def test_a_reach_forbidden_only_transitively_is_caught(tmp_path):
    """sim -> workload (L8) -> wire (L9): every edge goes down, yet sim reaches the wire."""
    tree = _plant(
        tmp_path,
        {
            "genie/workload/_probe.py": "def f():\n    from genie.wire import messages\n",
            "genie/sim/_probe.py": "from genie.workload import _probe\n",
        },
    )
    assert _new(layer_violations, tree) == []
    reached = _new(_sim_reach, tree)
    assert reached, "the planted reach went unnoticed"
    assert all(
        m.startswith("genie.sim._probe -> genie.workload._probe -> genie.wire") for m in reached
    ), reached
    assert any(m.endswith("(genie.sim may not reach genie.wire)") for m in reached), reached


def test_a_same_layer_import_is_caught(tmp_path):
    tree = _plant(tmp_path, {"genie/live/_probe.py": "import genie.report\n"})
    assert LAYER_OF["genie.live"] == LAYER_OF["genie.report"]
    assert _new(layer_violations, tree) == [
        "genie.live._probe imports genie.report (layer L4 may not import L4 package "
        "genie.report: the same layer) at genie/live/_probe.py:1"
    ]


def test_an_unknown_package_is_caught(tmp_path):
    tree = _plant(
        tmp_path,
        {"genie/_newthing.py": "", "genie/sim/_probe.py": "from genie import _newthing\n"},
    )
    assert _new(unknown_packages, tree) == [
        "package genie._newthing (genie/_newthing.py) is in no layer: add it to LAYERS in "
        "tests/_layers.py (the layer it belongs to says who may import it)"
    ]


def test_type_checking_imports_obey_the_layers_but_do_not_reach(tmp_path):
    tree = _plant(
        tmp_path,
        {
            "genie/sim/_probe.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from genie.store import Store\n"  # sideways: still a dependency
                "    from genie.wire import messages\n"  # downward: fine, and never runs
            )
        },
    )
    assert _new(layer_violations, tree) == [
        "genie.sim._probe imports genie.store (TYPE_CHECKING) (layer L8 may not import L8 "
        "package genie.store: the same layer) at genie/sim/_probe.py:3"
    ]
    assert _new(_sim_reach, tree) == []


_FACADE = """

def __getattr__(name):
    import importlib

    return getattr(importlib.import_module("genie.api"), name)
"""


def test_the_top_package_may_be_a_lazy_facade_over_the_api(tmp_path):
    tree = _plant(
        tmp_path,
        {
            "genie/__init__.py": _FACADE,
            "genie/sim/_probe.py": (
                "from genie import __version__, units\nimport genie\nV = genie.__version__\n"
            ),
        },
        append=True,
    )
    assert any(e.facade and e.target == "genie.api" for e in tree.edges)
    for check in (layer_violations, facade_violations, _sim_reach, unknown_packages):
        assert _new(check, tree) == [], check.__name__
    assert not [c for c in package_cycles(tree) if "genie" in c]


def test_the_facade_reaches_the_api_only_and_the_tree_does_not_read_through_it(tmp_path):
    tree = _plant(
        tmp_path,
        {
            "genie/__init__.py": _FACADE + "\ndef __dir__():\n    from genie import sim\n",
            "genie/sim/_probe.py": "import genie\nfrom genie import simulate\nX = genie.Fabric\n",
        },
        append=True,
    )
    new = _new(facade_violations, tree)
    assert len(new) == 3, new
    assert new[0].startswith("genie imports genie.sim in its lazy facade at genie/__init__.py:")
    assert new[1].startswith("genie.sim._probe (genie/sim/_probe.py:2) imports simulate from genie")
    assert new[2].startswith("genie.sim._probe (genie/sim/_probe.py:3) reads genie.Fabric")


def test_a_cycle_between_packages_is_caught(tmp_path):
    tree = _plant(tmp_path, {"genie/errors.py": "\ndef f():\n    import genie.sim\n"}, append=True)
    cycles = [cycle_evidence(tree, c) for c in package_cycles(tree)]
    assert any(c.startswith("genie.errors -> genie.sim -> ") for c in cycles), cycles
    assert any(
        m.startswith(
            "genie.errors imports genie.sim (layer L11 may not import L8 package genie.sim: "
            "a higher layer) at genie/errors.py:"
        )
        for m in _new(layer_violations, tree)
    )


def test_every_declared_package_is_placed_once():
    seen = [pkg for pkg in LAYER_OF]
    assert len(seen) == len(set(seen))
    assert all(package_of(p) == p for p in seen), seen


# -- the agent on a lean host -------------------------------------------------------------------

_BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"matplotlib", "jax", "jaxlib", "fabric", "paramiko",
                                  "google", "ansible", "pytest", "hypothesis"}:
            raise ImportError(f"{name} is not installed on this lab host")
        return None
sys.meta_path.insert(0, _Block())
import runpy
sys.argv = ["genie_agent", *sys.argv[1:]]
runpy.run_module("genie_agent", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_agent_runs_a_job_without_the_controllers_heavy_dependencies(tmp_path):
    """Agents on a host without matplotlib, jax, fabric, protobuf: hello, prepare, run."""
    from genie.collectives import build_program
    from genie.controller.local import free_port_range, open_controller
    from genie.testbed import loopback_testbed

    base = free_port_range(2)
    tb = loopback_testbed(2, base_port=base)
    procs = []
    logs = []
    try:
        for h in tb.hosts:
            log = tmp_path / f"{h.name}.log"
            logs.append(log)
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-I",
                            "-c",
                            _BLOCKER,
                            "--listen",
                            h.control,
                            "--id",
                            h.name,
                            "--data-addr",
                            h.data_addr,
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        cwd=tmp_path,
                    )
                )
        deadline = time.monotonic() + 20
        while not all("listening on" in p.read_text() for p in logs):
            assert time.monotonic() < deadline, [p.read_text() for p in logs]
            assert all(p.poll() is None for p in procs), [p.read_text() for p in logs]
            time.sleep(0.05)
        ctl = open_controller(tb)
        try:
            ctl.connect()
            ctl.sync_clocks(rounds=2)
            ctl.prepare([build_program("all_reduce", "ring", 2, 1 << 16)], ["h0", "h1"])
            out = ctl.run(iters=2)
            assert len(out.instances) == 2
            ctl.release()
        finally:
            ctl.close()
            ctl.t.close()
    finally:
        for p in procs:
            p.terminate()  # ours, by pid
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
    text = "".join(p.read_text() for p in logs)
    assert "Traceback" not in text, text
