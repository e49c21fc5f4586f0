"""Finding a workload's rank files among other files (``loader.find_rank_files``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.errors import WorkloadError
from genie.workload.loader import all_rank_files, find_rank_files, load_workload


def _touch(d: Path, *names: str) -> None:
    for name in names:
        (d / name).write_bytes(b"")


def test_rank_files_of_one_prefix_among_other_workloads(tmp_path: Path) -> None:
    _touch(tmp_path, "a.0.et", "a.1.et.gz", "a.2.json", "ab.0.et", "b.0.et", "a.x.et", "a.0.txt")
    prefix, found = find_rank_files(tmp_path / "a")
    assert prefix == tmp_path / "a"
    assert found == {0: tmp_path / "a.0.et", 1: tmp_path / "a.1.et.gz", 2: tmp_path / "a.2.json"}
    assert find_rank_files(tmp_path / "a.1.et.gz") == (prefix, found)
    with pytest.raises(WorkloadError, match="holds several workloads \\(a, ab, b\\)"):
        find_rank_files(tmp_path)
    (tmp_path / "only").mkdir()
    _touch(tmp_path / "only", "w.0.et", "w.1.et", "notes.txt")
    assert find_rank_files(tmp_path / "only")[1] == {
        0: tmp_path / "only" / "w.0.et",
        1: tmp_path / "only" / "w.1.et",
    }


def test_a_rank_twice_or_missing_is_an_error(tmp_path: Path) -> None:
    _touch(tmp_path, "a.0.et", "a.0.json", "c.0.et", "c.2.et")
    with pytest.raises(WorkloadError, match=r"a: rank 0 exists as both a\.0\.(et|json) and"):
        find_rank_files(tmp_path / "a")
    with pytest.raises(WorkloadError, match=r"rank files missing for ranks \[1\]"):
        all_rank_files(tmp_path / "c")
    with pytest.raises(WorkloadError, match=r"no rank files .*d\.<rank>\.et"):
        load_workload(tmp_path / "d")
