"""Shared by root tests that build netns testbeds: why they cannot run here, and a star."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from genie.testbed import load_testbed, netns
from tests._agents import netns_unavailable


def unavailable(prefix: str) -> str | None:
    """Why netns tests with namespaces named ``prefix...`` cannot run here (None: they can)."""
    return netns_unavailable(f"{prefix}probe")


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
