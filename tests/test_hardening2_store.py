"""A run store deleted or replaced mid-run is never a silent success (issue 31 item 4).

Real agents on loopback run ``genie bench`` through the CLI; after its first batch of instances
is written, the store file (and its -wal, -shm) is deleted, or replaced by another SQLite file.
Before the fix the bench printed "stored as run ..." with rc 0 while every instance was gone.
"""

from __future__ import annotations

import os
import shutil

import pytest
from _agents import start_agent, write_testbed

from genie import cli
from genie.errors import StoreError
from genie.store import RunStore


@pytest.fixture
def two_agents(tmp_path):
    got = [start_agent(tmp_path, f"h{i}") for i in range(2)]
    yield got
    for a in got:
        a.stop()


def _after_first_batch(monkeypatch, act) -> list[int]:
    """Run ``act`` once, just after the bench's first batch of instances is stored."""
    original, seen = RunStore.add_instances, []

    def add_instances(self, *a, **kw):
        out = original(self, *a, **kw)
        if not seen:
            seen.append(1)
            act(self.path)
        return out

    monkeypatch.setattr(RunStore, "add_instances", add_instances)
    return seen


def _delete(path) -> None:
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{path}{suffix}")


def _replace(path) -> None:
    other = path.with_name("other.sqlite")
    RunStore(other).close()
    shutil.move(other, path)


@pytest.mark.parametrize("act", [_delete, _replace], ids=["deleted", "replaced"])
def test_a_store_lost_mid_run_is_not_stored_and_is_recovered(
    tmp_path, two_agents, monkeypatch, capsys, act
) -> None:
    store = tmp_path / "runs.sqlite"
    seen = _after_first_batch(monkeypatch, act)
    tb = write_testbed(tmp_path / "tb.toml", two_agents)
    argv = ["bench", "--testbed", str(tb), "--sizes", "64KiB,128KiB", "--iters", "20"]
    rc = cli.main([*argv, "--warmup", "1", "--store", str(store)])
    out, err = capsys.readouterr()
    print(f"\nstore {act.__name__[1:]} after the first batch: rc {rc}; {err.strip()}")
    assert seen
    assert rc != 0, out  # was: rc 0, "stored as run r2026..." and the rows gone
    assert "stored as run" not in out
    assert err.count("\n") == 1 and "run NOT stored" in err and "Traceback" not in err
    (saved,) = tmp_path.glob("runs.sqlite.*.recovered.sqlite")
    with RunStore(saved) as st:
        (info,) = st.list_runs()
        kept = st.instances(info.run_id, include_warmup=True)
        assert info.status == "ok" and len(kept) == info.instances >= 2 * 21
    assert info.run_id in err and str(saved) in err


def test_an_intact_store_verifies(tmp_path) -> None:
    with RunStore(tmp_path / "s.sqlite") as st:
        rid = st.start_run("x")
        st.finish_run(rid)
        st.verify_run(rid, 0)
        with pytest.raises(StoreError, match=r"NOT stored: .* holds 0 of run .* 3 instances"):
            st.verify_run(rid, 3)
