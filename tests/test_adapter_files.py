"""``genie.sim.adapter.load_workload`` lists a workload's rank files once: the files it sized to
choose between columns and objects are the ones the loader reads; where it found none (or a
gap) the loader looks itself and names the problem."""

from __future__ import annotations

import pytest

from genie.errors import WorkloadError
from genie.sim import adapter
from genie.workload import loader, save_workload
from genie.workload.generators import llm


def test_the_files_sized_are_the_files_read(tmp_path, monkeypatch) -> None:
    save_workload(llm(8, tp=2, pp=2, layers=2), tmp_path / "w")
    calls = []
    real = loader.all_rank_files

    def counted(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(loader, "all_rank_files", counted)
    wl = adapter.load_workload(tmp_path / "w", columns=None)
    assert len(calls) == 1
    ref = loader.load_workload(tmp_path / "w")
    assert len(calls) == 2  # (without ``files`` the loader lists them itself)
    assert wl.n_ranks == ref.n_ranks == 8 and wl.groups == ref.groups
    for a, b in zip(wl.ranks, ref.ranks, strict=True):
        assert a.source == b.source
        assert [(n.id, n.name, n._d) for n in a.nodes] == [(n.id, n.name, n._d) for n in b.nodes]
    assert adapter._et_bytes(tmp_path / "w") == sum(
        f.stat().st_size for f in tmp_path.glob("w.*.et")
    )


def test_a_missing_rank_file_is_named_by_the_loader(tmp_path) -> None:
    save_workload(llm(8, tp=2, pp=2, layers=2), tmp_path / "w")
    (tmp_path / "w.3.et").unlink()
    assert adapter._et_files(tmp_path / "w") == (None, -1)
    with pytest.raises(WorkloadError, match="rank files missing for ranks \\[3\\]"):
        adapter.load_workload(tmp_path / "w", columns=None)


def test_files_a_caller_passes_must_be_the_paths_rank_files(tmp_path) -> None:
    save_workload(llm(8, tp=2, pp=2, layers=2), tmp_path / "w")
    save_workload(llm(8, tp=2, pp=2, layers=2), tmp_path / "other")
    files = loader.all_rank_files(tmp_path / "w")
    # as found: loads, named by the prefix or by one of its rank files
    for path in (tmp_path / "w", tmp_path / "w.3.et"):
        assert loader.load_workload(path, files=files).n_ranks == 8
    prefix, found, n = files
    # a rank missing from the list: one line, not a KeyError
    gap = (prefix, {r: f for r, f in found.items() if r != 5}, n)
    with pytest.raises(WorkloadError, match=r"not ranks 0\.\.7"):
        loader.load_workload(tmp_path / "w", files=gap)
    # a rank count below the files': refused, not read as a smaller workload
    with pytest.raises(WorkloadError, match=r"not ranks 0\.\.2"):
        loader.load_workload(tmp_path / "w", files=(prefix, found, 3))
    # another workload's files under this path's name: refused
    other = loader.all_rank_files(tmp_path / "other")
    with pytest.raises(WorkloadError, match="rank files given are"):
        loader.load_workload(tmp_path / "w", files=other)
    # a file swapped for another rank's
    swapped = (prefix, {**found, 2: found[3]}, n)
    with pytest.raises(WorkloadError, match="is not its rank 2 file"):
        loader.load_workload(tmp_path / "w", files=swapped)
