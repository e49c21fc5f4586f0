"""Memory admission across a host: agents on one machine are counted together, and a plan that
does not fit is refused in one line before any agent allocates (``genie.controller.admission``).
"""

from __future__ import annotations

import pytest

import genie
from genie.cli import main
from genie.collectives import build_program
from genie.controller.admission import check_memory, machines, one_at_a_time
from genie.controller.local import LocalCluster, open_controller
from genie.controller.session import Controller
from genie.errors import AdmissionError
from genie.live.plan import OpListPlan
from genie.wire.messages import HostFacts

GIB = 1 << 30


def _facts(host_id: str, avail: int, hostname: str = "m0") -> HostFacts:
    return HostFacts(hostname=hostname, host_id=host_id, memory_available=avail)


def test_agents_of_one_machine_are_counted_together() -> None:
    facts = {"h0": _facts("boot:a", 5 * GIB), "h1": _facts("boot:a", 5 * GIB)}
    with pytest.raises(AdmissionError) as info:
        check_memory({"h0": 3 * GIB, "h1": 3 * GIB}, facts)
    text = str(info.value)
    assert text.startswith("the plan needs 6 GiB on host m0 (agents h0, h1), 5 GiB available")
    assert "GiB = 2^30 bytes" in text and "90%" in text and "\n" not in text
    # the same needs on two machines fit
    apart = {"h0": _facts("boot:a", 5 * GIB), "h1": _facts("boot:b", 5 * GIB, "m1")}
    check_memory({"h0": 3 * GIB, "h1": 3 * GIB}, apart)
    assert machines(apart) == {"boot:a": ["h0"], "boot:b": ["h1"]}


def test_the_headroom_and_agents_that_do_not_say() -> None:
    one = {"h0": _facts("boot:a", 10 * GIB)}
    check_memory({"h0": int(8.9 * GIB)}, one)  # under 90 %
    with pytest.raises(AdmissionError, match=r"needs 9.1 GiB on host m0 \(agent h0\), 10 GiB"):
        check_memory({"h0": int(9.1 * GIB)}, one)
    check_memory({"h0": 10**15}, {"h0": _facts("boot:a", 0)})  # an older agent: not known
    check_memory({"h0": 10**15}, {"h0": HostFacts()})
    # two hosts short: both named, still one line
    two = {"h0": _facts("boot:a", GIB), "h1": _facts("boot:b", GIB, "m1")}
    with pytest.raises(AdmissionError) as info:
        check_memory({"h0": 2 * GIB, "h1": 3 * GIB}, two)
    assert "on host m0 (agent h0)" in str(info.value) and "on host m1 (agent h1)" in str(info.value)


def test_a_sweep_needs_its_largest_program_summed_over_each_agents_ranks() -> None:
    small = build_program("all_reduce", "ring", 2, 4096, size_convention="nccl")
    big = build_program("all_reduce", "ring", 2, 64 << 20, size_convention="nccl")
    per_rank = [sum(big.footprint(r)) for r in range(2)]
    assert min(per_rank) >= 64 << 20  # the working buffer at least
    assert one_at_a_time([small, big], ["h0", "h1"]) == {"h0": per_rank[0], "h1": per_rank[1]}
    assert one_at_a_time([big, small], ["h0", "h0"]) == {"h0": sum(per_rank)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster.start(2, tmp_path_factory.mktemp("cl")) as cl:
        yield cl


def test_local_agents_report_one_machine_and_its_available_memory(cluster) -> None:
    ctl = open_controller(cluster.testbed)
    try:
        hellos = ctl.connect()
    finally:
        ctl.close()
        ctl.t.close()
    facts = {a: h.facts for a, h in hellos.items()}
    assert len({f.host_id for f in facts.values()}) == 1 and facts["h0"].host_id
    avail = min(f.memory_available for f in facts.values())
    assert 0 < avail <= facts["h0"].memory_bytes
    check_memory({"h0": int(0.6 * avail)}, facts)  # one agent: fits
    with pytest.raises(AdmissionError, match=r"on host .* \(agents h0, h1\)"):
        check_memory({"h0": int(0.6 * avail), "h1": int(0.6 * avail)}, facts)  # together: not


def test_emulate_refuses_a_plan_larger_than_the_host_before_any_prepare(
    cluster, tmp_path, monkeypatch
) -> None:
    prefix = tmp_path / "dp"
    assert main(["workload", "generate", "dp", "--ranks", "2", "--out", str(prefix)]) == 0

    def too_much(self, placement, *rest) -> dict[str, int]:
        return dict.fromkeys(placement, 1 << 50)  # 1 PiB per agent

    monkeypatch.setattr(OpListPlan, "peak_bytes", too_much)
    prepared: list = []
    monkeypatch.setattr(Controller, "prepare", lambda self, *a, **k: prepared.append(a))
    spec = genie.EmulateSpec(
        testbed=str(cluster.testbed_path),
        workload=str(prefix),
        store=str(tmp_path / "runs.sqlite"),
        iterations=1,
        warmup=0,
    )
    with pytest.raises(AdmissionError) as info:
        genie.emulate(spec)
    text = str(info.value)
    print(f"\n{text}")
    assert "\n" not in text and "(agents h0, h1)" in text and "2.1e+06 GiB" in text
    assert not prepared


def test_bench_refuses_a_size_beyond_the_host_before_any_prepare(
    cluster, tmp_path, monkeypatch
) -> None:
    prepared: list = []
    monkeypatch.setattr(Controller, "prepare", lambda self, *a, **k: prepared.append(a))
    spec = genie.BenchSpec(
        testbed=str(cluster.testbed_path),
        sizes=(1 << 20, 1 << 45),  # 32 TiB: no host of this test has it
        iters=1,
        warmup=0,
        store=None,
        progress=False,
    )
    with pytest.raises(AdmissionError) as info:
        genie.bench(spec)
    text = str(info.value)
    assert "\n" not in text and "GiB available" in text
    assert not prepared  # refused before the first size was prepared
