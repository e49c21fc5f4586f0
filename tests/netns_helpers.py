"""Shared by root tests that build netns testbeds: why they cannot run here, and a star."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from genie.testbed import load_testbed, netns


def unavailable(prefix: str) -> str | None:
    """Why netns tests with namespaces named ``prefix...`` cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if netns.tools_missing():
        return f"needs {', '.join(netns.tools_missing())} (iproute2)"
    probe = f"{prefix}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if shutil.which("tc") else "tc missing"


@contextlib.contextmanager
def netns_testbed(d: Path, name: str, prefix: str, body: str):
    """A netns testbed of TOML ``body`` (its [topology] ...) with agents running (yields its
    file); removed after."""
    os.environ.setdefault("GENIE_STATE_DIR", str(d / "genie-state"))
    path = d / f"{name}.toml"
    path.write_text(
        f'[testbed]\nname = "{name}"\nkind = "netns"\nnetns_prefix = "{prefix}"\n{body}'
    )
    tb = load_testbed(path)
    try:
        netns.up(tb)
        netns.start_agents(tb)
        yield path
    finally:
        try:
            netns.down(tb)
        finally:
            netns.clean(prefix=prefix)


def star(d: Path, name: str, prefix: str, hosts: int, rate: str):
    """A star of ``hosts`` at ``rate`` with agents running (yields its file); removed after."""
    return netns_testbed(
        d, name, prefix, f'[topology]\nshape = "star"\nhosts = {hosts}\nrate = "{rate}"\n'
    )
