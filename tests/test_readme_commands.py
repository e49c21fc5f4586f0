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


@pytest.mark.slow
def test_readme_commands_run_or_fail_with_one_line(tmp_path):
    lines: list[str] = []
    failures = walk([sys.executable, "-m", "genie"], tmp_path, log=lines.append)
    print("\n".join(lines))
    assert failures == []
    ran = [x for x in lines if x.startswith(("ok", "line"))]
    assert len(ran) >= len(RULES)  # the walk really ran the commands
