"""One word per meaning in the CLI's tables (issue 32): the breakdown's part is "blocked" (a
collective ready but not started: peers late or queued behind its stream), the stragglers'
count is "waited for peers"; no column is a bare "wait" that could mean either."""

from __future__ import annotations

import re

from genie.cli import main
from genie.workload import save_workload
from genie.workload.generators import data_parallel

BARE_WAIT = re.compile(r"[┃│]\s*wait\s*[┃│]")


def test_simulate_names_blocked_and_waited_for_peers_apart(tmp_path, capsys):
    prefix = tmp_path / "dp"
    save_workload(data_parallel(4, layers=2, hidden=64), prefix)
    assert main(["simulate", str(prefix), "--straggler", "2=1.5", "--bandwidth", "10gbit"]) == 0
    out = capsys.readouterr().out
    assert not BARE_WAIT.search(out), out
    assert re.search(r"┃\s*blocked\s*┃", out) and "blocked: a collective ready" in out
    assert "waited for peers at collectives" in out and "┃ waited for peers ┃" in out
