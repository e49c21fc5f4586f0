"""Build the project's wheel for a deploy, cache it by source content, and bundle dependencies.

The wheel is built from a copy of the source tree (``genie/``, ``genie_agent/``, ``pyproject.toml``,
``README.md``) so the checkout is never written to. Its identity for idempotence is
``wheel_digest``: a hash over the archive's member names and bytes, not over the zip itself
(zip timestamps would change it without a change of code).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from genie.errors import DeployError

SOURCE_PARTS = ("genie", "genie_agent", "pyproject.toml", "README.md")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
BUILD_TIMEOUT_S = 300.0


def repo_root() -> Path:
    """The source checkout genie runs from (the directory holding pyproject.toml)."""
    import genie

    root = Path(genie.__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        raise DeployError(
            f"genie runs from {root}, not a source checkout; pass --wheel FILE to deploy a wheel"
        )
    return root


def source_digest(root: Path) -> str:
    """Hash of every source file that goes into the wheel (names and bytes)."""
    h = hashlib.sha256()
    for part in SOURCE_PARTS:
        p = root / part
        files = [p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []
        for f in files:
            if not f.is_file() or "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(str(f.relative_to(root)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def wheel_digest(wheel: Path) -> str:
    """Hash over the wheel's member names and contents (independent of zip timestamps)."""
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in sorted(z.namelist()):
                h.update(name.encode() + b"\0" + z.read(name) + b"\0")
    except (OSError, zipfile.BadZipFile) as exc:
        raise DeployError(f"{wheel}: not a readable wheel: {exc}") from None
    return h.hexdigest()


def _pip(args: list[str], what: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise DeployError(f"{what}: pip did not finish within {BUILD_TIMEOUT_S:.0f} s") from None
    if proc.returncode:
        lines = [x for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
        last = next((x for x in reversed(lines) if "ERROR" in x), lines[-1] if lines else "")
        raise DeployError(f"{what} failed: {last.strip()}")


def cache_dir() -> Path:
    """Where built wheels and dependency bundles are kept between deploys."""
    base = Path(tempfile.gettempdir()) / "genie-deploy-cache"
    base.mkdir(parents=True, exist_ok=True)
    return base


def build_wheel(root: Path | None = None, cache: Path | None = None) -> Path:
    """Build (or reuse from the cache) the wheel of the checkout at ``root``; return its path."""
    src = root or repo_root()
    cdir = (cache or cache_dir()) / f"wheel-{source_digest(src)[:20]}"
    found = sorted(cdir.glob("genie-*.whl")) if cdir.is_dir() else []
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(prefix="genie-build-") as tmp:
        copy = Path(tmp) / "src"
        copy.mkdir()
        for part in SOURCE_PARTS:
            p = src / part
            if p.is_dir():
                shutil.copytree(p, copy / part, ignore=_IGNORE)
            elif p.is_file():
                shutil.copy2(p, copy / part)
        out = Path(tmp) / "out"
        _pip(["wheel", "--no-deps", "-q", "-w", str(out), str(copy)], "building the genie wheel")
        wheels = sorted(out.glob("genie-*.whl"))
        if not wheels:
            raise DeployError("building the genie wheel produced no genie-*.whl")
        cdir.mkdir(parents=True, exist_ok=True)
        final = cdir / wheels[0].name
        shutil.copy2(wheels[0], final)
    return final


def bundle_dependencies(wheel: Path, extras: str = "", cache: Path | None = None) -> list[Path]:
    """Wheels of ``wheel``'s dependencies for this platform (for hosts without an index)."""
    tag = wheel_digest(wheel)[:20] + (f"-{extras}" if extras else "")
    bdir = (cache or cache_dir()) / f"bundle-{tag}"
    done = bdir / ".complete"
    if not done.exists():
        bdir.mkdir(parents=True, exist_ok=True)
        target = f"{wheel}[{extras}]" if extras else str(wheel)
        _pip(["wheel", "-q", "-w", str(bdir), target], "bundling dependency wheels")
        done.write_text("ok\n")
    return sorted(p for p in bdir.glob("*.whl") if not p.name.startswith("genie-"))
