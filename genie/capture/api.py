"""Capture a workload from the compiler: run the JAX lowering in a subprocess, convert its HLO.

The parent process never imports jax: ``capture_jax`` starts ``genie.capture.jax_runner`` in a
fresh interpreter (the device count is fixed at jax's first import), reads back the optimized
HLO and ``cost_analysis()``, and converts the HLO with ``genie.capture.convert``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from genie.capture.convert import CaptureCost, Conversion, hlo_to_workload
from genie.capture.hlo import parse_hlo
from genie.errors import MissingDependency, UsageError, WorkloadError
from genie.extras import install_hint
from genie.workload.loader import save_workload


def jax_available() -> bool:
    """True when jax can be imported (without importing it)."""
    return importlib.util.find_spec("jax") is not None


def parse_mesh(text: str | None, devices: int) -> list[tuple[str, int]]:
    """``dp=2,tp=4`` -> [('dp', 2), ('tp', 4)]; the sizes must multiply to ``devices``."""
    if devices < 1:
        raise UsageError(f"--devices must be >= 1, got {devices}")
    if not text:
        return [("dp", devices)]
    axes: list[tuple[str, int]] = []
    for part in text.split(","):
        name, eq, size = part.strip().partition("=")
        if not eq or not name.isidentifier() or not size.strip().isdigit():
            raise UsageError(f"--mesh: expected NAME=SIZE[,NAME=SIZE...], got {text!r}")
        if any(a == name for a, _ in axes):
            raise UsageError(f"--mesh: axis {name!r} given twice")
        axes.append((name, int(size)))
    if math.prod(s for _, s in axes) != devices or any(s < 1 for _, s in axes):
        total = math.prod(s for _, s in axes)
        raise UsageError(f"--mesh {text} has {total} devices, not {devices}")
    return axes


@dataclass
class CaptureResult:
    """A captured workload, the compiler's own cost figures, and where it was written."""

    conversion: Conversion
    cost_analysis: dict
    hlo: str
    jax_version: str
    files: list[Path]


_ERROR_RE = re.compile(r"^([\w.]+(Error|Exception)(:|$)|capture: )")


def _error_line(stderr: str) -> str:
    """The most telling line of a failed runner's stderr (its last exception line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if _ERROR_RE.match(ln):
            return ln[:300]
    return lines[-1][:300] if lines else ""


def lower_in_subprocess(
    jobs: list[tuple[str, list[tuple[str, int]]]], devices: int, timeout: float = 600.0
) -> list[dict]:
    """Lower each (target, mesh axes) job in one fresh interpreter with ``devices`` CPU devices;
    returns the runner's JSON answers (``hlo``, ``cost_analysis``, ``jax_version``, ...)."""
    for target, _ in jobs:
        if ":" not in target:
            raise UsageError(f"capture target must be MODULE:FUNCTION, got {target!r}")
    if not jax_available():
        raise MissingDependency(
            f"genie capture jax (lowering with XLA) needs jax, which is not installed "
            f"({install_hint('capture')})"
        )
    with tempfile.TemporaryDirectory(prefix="genie-capture-") as tmp:
        answer = Path(tmp) / "answer.json"
        req = {
            "devices": devices,
            "jobs": [{"target": t, "mesh": m} for t, m in jobs],
            "answer": str(answer),
        }
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        names = ", ".join(t for t, _ in jobs)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "genie.capture.jax_runner", json.dumps(req)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise WorkloadError(f"capture of {names} took longer than {timeout:.0f} s") from None
        if proc.returncode != 0 or not answer.exists():
            last = _error_line(proc.stderr) or f"exit code {proc.returncode}"
            raise WorkloadError(f"capture of {names} failed: {last}")
        return json.loads(answer.read_text())


def convert_answer(
    answer: dict,
    target: str,
    devices: int,
    axes: list[tuple[str, int]],
    *,
    out: str | Path | None = None,
    cost: CaptureCost | None = None,
) -> CaptureResult:
    """Turn one runner answer into a CaptureResult (and the ET files when ``out`` is given)."""
    module = parse_hlo(answer["hlo"])
    if max(module.num_partitions, module.num_replicas) != devices:
        raise WorkloadError(
            f"compiled module has {module.num_partitions} partitions, {devices} devices asked"
        )
    if answer["device_ids"] != list(range(devices)):
        raise WorkloadError(f"mesh devices are {answer['device_ids']}, expected 0..{devices - 1}")
    params = {
        "target": target,
        "devices": devices,
        "mesh": ",".join(f"{a}={s}" for a, s in axes),
        "jax": answer["jax_version"],
    }
    conv = hlo_to_workload(module, mesh=axes, cost=cost, name="capture", params=params)
    conv.workload.name = Path(out).name if out else "capture"
    files = save_workload(conv.workload, out) if out else []
    return CaptureResult(conv, answer["cost_analysis"], answer["hlo"], answer["jax_version"], files)


def capture_jax(
    target: str,
    devices: int,
    mesh: str | None = None,
    *,
    out: str | Path | None = None,
    cost: CaptureCost | None = None,
    timeout: float = 600.0,
) -> CaptureResult:
    """Lower ``MODULE:FUNCTION`` for ``devices`` CPU devices and convert it to per-rank ETs.

    Writes ``<out>.<rank>.et`` (and the comm-group file) when ``out`` is given.
    """
    axes = parse_mesh(mesh, devices)
    (answer,) = lower_in_subprocess([(target, axes)], devices, timeout)
    return convert_answer(answer, target, devices, axes, out=out, cost=cost)


def capture_hlo_file(
    path: str | Path,
    mesh: str | None = None,
    *,
    out: str | Path | None = None,
    cost: CaptureCost | None = None,
) -> Conversion:
    """Convert an HLO text file (``as_text()`` or an XLA dump's ``after_optimizations.txt``).

    The rank count is the module's partitions (or replicas); ``mesh`` only names the groups.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read: {exc.strerror}") from None
    module = parse_hlo(text)
    n = max(module.num_partitions, module.num_replicas)
    axes = parse_mesh(mesh, n) if mesh else None
    params = {"hlo": p.name, "devices": n}
    conv = hlo_to_workload(module, mesh=axes, cost=cost, name="capture", params=params)
    conv.workload.name = Path(out).name if out else p.stem
    if out:
        save_workload(conv.workload, out)
    return conv
