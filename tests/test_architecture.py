"""The layout's rules, checked on the source: who may import whom, and no cycles between packages.

Every import counts, also the ones inside functions (a lazy import is still a dependency). A
"package" is ``agents`` or a first-level ``genie.X`` (module or subpackage).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "genie":
        return ".".join(parts[:2]) if len(parts) > 1 else "genie"
    return parts[0]


def _is_module(package: str, name: str) -> bool:
    base = ROOT.joinpath(*package.split("."), name)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports() -> dict[str, set[tuple[str, str]]]:
    """package -> {(importing module, imported module)} for imports of genie/agents code."""
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    files = [*ROOT.glob("genie/**/*.py"), *ROOT.glob("genie_agent/**/*.py")]
    assert len(files) > 50
    for f in files:
        mod = _module(f)
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [
                    f"{node.module}.{a.name}" for a in node.names if _is_module(node.module, a.name)
                ]
            for n in names:
                if n.split(".")[0] in ("genie", "genie_agent"):
                    out[_package(mod)].add((mod, n))
    return out


def _deps(imports, pkg: str) -> dict[str, list[str]]:
    """Packages ``pkg`` imports -> the module-level evidence."""
    got: dict[str, list[str]] = defaultdict(list)
    for mod, target in imports.get(pkg, ()):
        tp = _package(target)
        if tp != pkg:
            got[tp].append(f"{mod} imports {target}")
    return got


def test_the_simulator_is_a_pure_model():
    deps = _deps(_imports(), "genie.sim")
    banned = {
        "genie.controller",
        "genie_agent",
        "genie.store",
        "genie.emulate",
        "genie.commands",
        "genie.deploy",
        "genie.wire",
        "genie.testbed",
    }
    bad = {p: ev for p, ev in deps.items() if p in banned}
    assert not bad, bad


def test_no_import_cycle_crosses_packages():
    imports = _imports()
    graph = {pkg: set(_deps(imports, pkg)) for pkg in imports}
    cycles = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least package
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    assert not cycles, cycles


def test_agents_and_controller_meet_only_on_the_wire():
    imports = _imports()
    agent_deps = set(_deps(imports, "genie_agent"))
    allowed = {
        "genie",  # __version__
        "genie.errors",
        "genie.wire",
        "genie.collectives",  # step programs are what agents run
        "genie.vocabulary",
        "genie.keys",  # CURVE key files
    }
    assert agent_deps <= allowed, agent_deps - allowed
    for side in ("genie.controller", "genie.emulate", "genie.deploy"):
        assert "genie_agent" not in _deps(imports, side), _deps(imports, side)["genie_agent"]
    wire_deps = set(_deps(imports, "genie.wire"))
    assert wire_deps <= {"genie.errors"}, wire_deps


def test_the_mistakes_this_rule_catches_would_be_caught(tmp_path):
    """The checker itself: a lazy import inside a function is seen."""
    f = ROOT / "genie" / "sim" / "_arch_probe_tmp.py"
    f.write_text("def f():\n    from genie.controller import session\n")
    try:
        deps = _deps(_imports(), "genie.sim")
        assert "genie.controller" in deps
    finally:
        f.unlink()


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
