"""Shared pytest fixtures: paths to the repository and to the shared Chakra samples."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_SAMPLES = REPO.parent / "shared" / "et-samples"


@pytest.fixture
def et_samples() -> Path:
    """The shared real Chakra traces; skip when this clone has no ../shared beside it."""
    if not SHARED_SAMPLES.is_dir():
        pytest.skip(f"shared Chakra samples not found at {SHARED_SAMPLES} (user clones lack them)")
    return SHARED_SAMPLES


@pytest.fixture(scope="session")
def dp(tmp_path_factory) -> str:
    """A small 4-rank data-parallel step (2 layers) written as Chakra files: its prefix."""
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    prefix = tmp_path_factory.mktemp("dp") / "dp"
    save_workload(data_parallel(4, layers=2, hidden=1024, seq=512, batch=2), prefix)
    return str(prefix)
