"""`genie testbed clean` spares a namespace genie did not make (issue 31 item 7, real ip).

A namespace named like genie's (``genie-...``) but recorded by no testbed survives every form of
``clean``; the records live in a state directory of this test's own, so ``--all-genie`` sweeps
only what this test recorded (other users' testbeds on this machine are never touched).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from _agents import netns_unavailable

from genie import cli
from genie.testbed import load_testbed, netns, state

FOREIGN = f"genie-userstuff{os.getpid() % 100_000}"
PREFIX = "genie-zq-"


def _namespaces() -> set[str]:
    return set(netns.list_namespaces())


@pytest.fixture
def foreign(tmp_path, monkeypatch):
    why = netns_unavailable(f"{PREFIX}probe")
    if why:
        pytest.skip(why)
    monkeypatch.setenv("GENIE_STATE_DIR", str(tmp_path / "genie-state"))
    subprocess.run(["ip", "netns", "add", FOREIGN], check=True, capture_output=True)
    try:
        yield FOREIGN
    finally:
        subprocess.run(["ip", "netns", "del", FOREIGN], capture_output=True)
        netns.clean(prefix=PREFIX)


def test_clean_spares_a_namespace_genie_did_not_make(tmp_path: Path, foreign, capsys) -> None:
    tb_path = tmp_path / "tb.toml"
    tb_path.write_text(
        f'[testbed]\nname = "zq"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n'
        '[topology]\nshape = "star"\nhosts = 2\nrate = "100Mbit"\n'
    )
    tb = load_testbed(tb_path)
    netns.up(tb)
    mine = set(state.load(state.record_path(tb.name, tb.netns_prefix)).namespaces)  # type: ignore[union-attr]
    assert mine <= _namespaces() and foreign in _namespaces()
    assert cli.main(["testbed", "clean", "--all-genie"]) == 0
    out = capsys.readouterr().out
    assert not mine & _namespaces() and foreign in _namespaces()  # was: foreign removed
    assert foreign in out  # named as left, with why
    for argv in (["--prefix", PREFIX], [str(tb_path)]):
        assert cli.main(["testbed", "clean", *argv]) == 0
        assert foreign in _namespaces()
    assert cli.main(["testbed", "clean", "--prefix", "genie-"]) == 2
    assert foreign in _namespaces()
