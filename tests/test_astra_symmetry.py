"""The symmetric shortcut under ``--model astra-*``: taken only where it is proven.

The congestion-aware model lets messages that share a link delay each other, so one rank's replay
stands for all only if the links each rank's messages use look alike from every rank. On a Ring,
halvingDoubling's partners (rank XOR 2^k) break that: the ranks finish at different times, and
ASTRA-sim (like genie's per-rank replay, ``--no-symmetry``) reports those times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import genie
from genie.api.workload import build
from genie.cli import build_parser
from genie.commands.workload import generate_spec
from genie.sim.adapter import compile_workload
from genie.sim.astra_config import load_network, load_system
from genie.sim.symmetry import astra_symmetry_refusal, representatives
from genie.workload import save_workload

REF = Path(__file__).parent / "data" / "astra"


def generate(kind: str, ranks: int = 8):
    """The workload ``genie workload generate KIND --ranks N`` writes."""
    ns = build_parser().parse_args(
        ["workload", "generate", kind, "--ranks", str(ranks), "--out", "unused"]
    )
    return build(generate_spec(ns), ns.target, [])


def generated(tmp_path, kind: str, ranks: int = 8) -> str:
    """``generate(kind, ranks)`` saved under ``tmp_path``; the prefix."""
    prefix = tmp_path / kind / kind
    save_workload(generate(kind, ranks), prefix)
    return str(prefix)


def finishes(prefix: str, model: str, net: str, system: str, symmetry: bool):
    """(per-rank finish times in ns, whether the replay was symmetric)."""
    m = genie.Model(
        kind=model,
        astra_network=str(REF / "net" / net),
        astra_system=str(REF / "sys" / system),
    )
    (rep,) = genie.simulate(genie.SimulateSpec(workload=prefix, model=m, symmetry=symmetry)).reports
    return [round(r.finish * 1e9) for r in rep.ranks], rep.symmetric


@pytest.mark.parametrize("kind", ["dp", "moe"])
@pytest.mark.parametrize("system", ["halvingDoubling_s4_c2.json", "halvingDoubling_s4.json"])
def test_aware_ring_halving_doubling_replays_every_rank(tmp_path, kind, system):
    """Issue 33's corner: per-rank finishes equal --no-symmetry's (they differ by rank)."""
    prefix = generated(tmp_path, kind)
    full, full_sym = finishes(prefix, "astra-aware", "Ring8.yml", system, symmetry=False)
    got, sym = finishes(prefix, "astra-aware", "Ring8.yml", system, symmetry=True)
    assert got == full
    assert not full_sym and not sym
    if system.endswith("_c2.json"):  # two chunks in flight: ring position changes contention
        assert len(set(full)) > 1


@pytest.mark.parametrize(
    ("model", "net", "system"),
    [
        ("astra-aware", "Ring8.yml", "ring_s4_c2.json"),
        ("astra-aware", "Ring8.yml", "direct_s4_c2.json"),
        ("astra-aware", "Switch8.yml", "halvingDoubling_s4_c2.json"),
        ("astra-aware", "FullyConnected8.yml", "halvingDoubling_s4_c2.json"),
        ("astra-unaware", "Ring8.yml", "halvingDoubling_s4_c2.json"),
    ],
)
def test_shortcut_kept_where_proven_and_exact(tmp_path, model, net, system):
    """Rotation-invariant algorithms on a Ring, any algorithm on Switch / FullyConnected, and
    the unaware model keep the one-rank replay, and it gives every rank --no-symmetry's finish."""
    prefix = generated(tmp_path, "moe")
    got, sym = finishes(prefix, model, net, system, symmetry=True)
    full, _ = finishes(prefix, model, net, system, symmetry=False)
    assert sym
    assert got == full


def test_refusal_names_the_failed_obligation():
    """The reason says which algorithm, which topology and what fails."""
    cw = compile_workload(generate("dp"))
    assert representatives(cw) == [0]
    net = load_network(REF / "net" / "Ring8.yml")
    hd = load_system(REF / "sys" / "halvingDoubling_s4_c2.json")
    why = astra_symmetry_refusal(cw, net, hd, aware=True)
    assert why is not None and "halvingDoubling" in why and "Ring" in why
    assert astra_symmetry_refusal(cw, net, hd, aware=False) is None
    assert (
        astra_symmetry_refusal(cw, net, load_system(REF / "sys" / "ring_s4_c2.json"), True) is None
    )
    switch = load_network(REF / "net" / "Switch8.yml")
    assert astra_symmetry_refusal(cw, switch, hd, aware=True) is None
