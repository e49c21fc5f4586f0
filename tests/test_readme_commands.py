"""README.md's commands, walked as a user would run them (see tests/readme_walk.py)."""

from __future__ import annotations

import sys

import pytest
from readme_walk import REPO, RULES, readme_commands, rule_for, walk


def test_every_readme_command_has_a_rule():
    cmds = readme_commands(REPO / "README.md")
    assert cmds[0] == "genie demo" and len(cmds) > 20
    assert [c for c in cmds if rule_for(c) is None] == []
    assert rule_for("genie frobnicate") is None  # a new README command fails the walk


def test_readme_commands_run_as_printed_from_a_fresh_clone():
    text = (REPO / "README.md").read_text()
    # the Quickstart puts the venv's genie on PATH for the commands that follow it
    assert ". .venv/bin/activate && genie demo" in text
    # sudo resets PATH: a root command names the venv's script, never a bare genie
    assert "sudo genie" not in text and "sudo .venv/bin/genie testbed up" in text
    # the measured example's run measured the all-reduces of the dp step it prices
    cmds = readme_commands(REPO / "README.md")
    bench = [c for c in cmds if c.startswith("sudo .venv/bin/genie bench")]
    assert bench and "--collective all_reduce" in bench[-1]
    assert any("measured:RUN_ID" in c for c in cmds[cmds.index(bench[-1]) :])


@pytest.mark.slow
def test_readme_commands_run_or_fail_with_one_line(tmp_path):
    lines: list[str] = []
    failures = walk([sys.executable, "-m", "genie"], tmp_path, log=lines.append)
    print("\n".join(lines))
    assert failures == []
    ran = [x for x in lines if x.startswith(("ok", "line"))]
    assert len(ran) >= len(RULES)  # the walk really ran the commands
