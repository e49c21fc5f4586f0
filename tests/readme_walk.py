"""Walk README.md's commands as a user would: every one runs, or fails with one clear line.

Standard library only, so it runs in a bare venv (``pip install .`` and nothing else), which is
how ``.ci/run`` uses it; ``tests/test_readme_commands.py`` runs it under pytest too. Usage::

    python tests/readme_walk.py [--genie-python PY]

It runs the Quickstart's ``genie demo`` and each line of the "What you can do with it" block in
a scratch directory (``/tmp/genie-demo`` and ``/tmp/genie-cluster`` are mapped there, testbed
files to the repository's, ``RUN_ID`` to the newest stored run). ``RULES`` says for each command
whether it must succeed, may fail with one line (a missing extra, a lab host this machine does
not have), needs root (netns; ``sudo`` is dropped when root, the command skipped otherwise) or is
not run (it would change this host's network devices). A traceback, an abort, a multi-line
error, or a README command no rule knows fails the walk (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (pattern on the command, what to expect): "ok" must exit 0; "line" exit 0 or a one-line
# `genie: error:`; "root" needs root (else skipped), then must exit 0; "skip: why" not run.
RULES: list[tuple[str, str]] = [
    (r"^genie demo\b", "ok"),
    (r"^genie workload (generate|inspect|convert|replicate|scale|slice)\b", "ok"),
    (r"^genie collective (list|show)\b", "ok"),
    (r"^genie nccl\b", "ok"),
    (r"^genie cluster local\b", "ok"),
    (r"^genie bench --testbed /\S*cluster", "ok"),
    (r"^genie emulate\b", "ok"),
    (r"^genie simulate\b", "ok"),
    (r"^genie capture jax\b", "line"),  # needs the capture extra (jax)
    (r"^genie runs (list|compare)\b", "ok"),
    (r"^genie calibrate\b", "ok"),
    (r"^genie report\b", "line"),  # needs the report extra (matplotlib)
    (r"^genie keys init\b", "ok"),
    (r"^genie (deploy|hosts check|agents)\b.*lab\.toml", "line"),  # lab placeholders
    (r"^sudo \.venv/bin/genie testbed softroce up\b", "skip: would add a soft-RoCE device"),
    (r"^sudo \.venv/bin/genie (testbed up|bench|testbed down)\b", "root"),
]


def readme_commands(readme: Path) -> list[str]:
    """The commands of the Quickstart's main line and the "What you can do with it" block."""
    text = readme.read_text()
    main = re.search(r"\. \.venv/bin/activate && (genie demo)\b", text)
    out = [main.group(1)] if main else []
    section = text.split("## What you can do with it", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    for raw in block.splitlines():
        line = raw.split("  #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def rule_for(cmd: str) -> str | None:
    """The expectation for a command, or None if no rule knows it."""
    for pattern, what in RULES:
        if re.search(pattern, cmd):
            return what
    return None


def _newest_run(genie: list[str], env: dict, cwd: Path) -> str:
    out = subprocess.run(
        [*genie, "runs", "list", "--json"], capture_output=True, text=True, env=env, cwd=cwd
    )
    runs = json.loads(out.stdout or "[]") if out.returncode == 0 else []
    ok = [r for r in runs if r.get("status") == "ok"]
    return ok[0]["run_id"] if ok else "no-run-yet"


def walk(genie: list[str], scratch: Path, log=print) -> list[str]:
    """Run every README command; return the failures (empty: the walk passed)."""
    env = {**os.environ, "HOME": str(scratch / "home"), "COLUMNS": "160"}
    (scratch / "home").mkdir(exist_ok=True)
    root = os.geteuid() == 0
    failures: list[str] = []
    cleanup: list[list[str]] = []
    try:
        for cmd in readme_commands(REPO / "README.md"):
            what = rule_for(cmd)
            if what is None:
                failures.append(f"no rule for README command: {cmd}")
                continue
            if what.startswith("skip"):
                log(f"SKIP  {cmd}  ({what[6:]})")
                continue
            if what == "root" and not root:
                log(f"SKIP  {cmd}  (needs root)")
                continue
            line = re.sub(r"^(sudo )?(\.venv/bin/)?", "", cmd)  # root: the venv's script
            line = line.replace("/tmp/genie-demo", str(scratch / "demo"))
            line = line.replace("/tmp/genie-cluster", str(scratch / "cluster"))
            line = re.sub(r"(?<![\w/])(testbed|tests)/", f"{REPO}/\\1/", line)
            if "RUN_ID" in line:
                line = line.replace("RUN_ID", _newest_run(genie, env, scratch))
            argv = [*genie, *shlex.split(line)[1:]]
            if line.startswith("genie testbed up"):
                cleanup.append([*genie, "testbed", "clean", argv[len(genie) + 2]])
            if line.startswith("genie cluster local") and "--stop" not in line:
                cleanup.append([*genie, "cluster", "local", "--stop", "--dir", argv[-1]])
            t0 = time.monotonic()
            res = subprocess.run(
                argv, capture_output=True, text=True, env=env, cwd=scratch, timeout=600
            )
            took = time.monotonic() - t0
            err = res.stderr.strip().splitlines()
            bad = ""
            if "Traceback" in res.stdout + res.stderr or res.returncode < 0:
                bad = f"traceback or abort (rc {res.returncode})"
            elif "measured:" in line and re.search(
                r"[1-9]\d* EXTRAPOLATED|never measured", res.stdout
            ):
                bad = "the measured example's run did not measure what the workload needs"
            elif res.returncode != 0 and what in ("ok", "root"):
                bad = f"exit {res.returncode}: {err[-1] if err else 'no message'}"
            elif res.returncode != 0:
                errors = [x for x in err if x.startswith("genie: error:")]
                if len(errors) != 1 or res.returncode not in (1, 2):
                    bad = f"exit {res.returncode} without one `genie: error:` line: {err[-3:]}"
            status = "FAIL" if bad else ("ok  " if res.returncode == 0 else "line")
            log(f"{status}  {cmd}  [{took:.1f} s]" + (f"\n      {bad}" if bad else ""))
            if res.returncode != 0 and not bad:
                log(f"      {err[-1]}")
            if bad:
                failures.append(f"{cmd}: {bad}")
    finally:
        for argv in reversed(cleanup):
            subprocess.run(argv, capture_output=True, env=env, cwd=scratch, timeout=120)
    return failures


def main(argv: list[str] | None = None) -> int:
    """Walk the README with ``--genie-python``'s genie (default: this interpreter's)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--genie-python", default=sys.executable, help="interpreter genie is in")
    args = p.parse_args(argv)
    # absolute (commands run in a scratch folder), not resolved: a venv's python is a symlink
    genie = [os.path.abspath(args.genie_python), "-m", "genie"]
    with tempfile.TemporaryDirectory(prefix="genie-readme-") as d:
        failures = walk(genie, Path(d))
    for f in failures:
        print(f"readme walk: {f}", file=sys.stderr)
    print(f"readme walk: {'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
