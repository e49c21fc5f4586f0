"""ASTRA-sim configurations in ``genie simulate``: ``--astra-network``, ``--astra-system``,
``--comm-group`` and the ``--model astra-unaware|astra-aware`` backends.

With ``--model genie`` the ASTRA-sim files set genie's own model instead: a 1-D network's
building block becomes genie's topology (Ring -> ring, Switch -> switch, FullyConnected ->
fully_connected) with its bandwidth (2^30 B/s) and latency per link, each collective's first
implementation its algorithm, and ``preferred-dataset-splits`` the chunk count.
"""

from __future__ import annotations

import argparse
from typing import Any

from genie.errors import ConfigError, UsageError, ValidationError
from genie.sim.astra_config import (
    IMPLEMENTATION_KEYS,
    AstraNetwork,
    AstraSystem,
    load_comm_groups,
    load_network,
    load_system,
)

MODELS = ("genie", "astra-unaware", "astra-aware")
_GENIE_TOPOLOGY = {"Ring": "ring", "Switch": "switch", "FullyConnected": "fully_connected"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ASTRA-sim options of ``genie simulate``."""
    p.add_argument(
        "--model",
        choices=MODELS,
        default="genie",
        help="pricing model: genie (default: genie's own), astra-unaware / astra-aware "
        "(ASTRA-sim 2.0's analytical congestion-unaware / -aware backend, reproduced)",
    )
    p.add_argument("--astra-network", metavar="N.yml", help="ASTRA-sim analytical network file")
    p.add_argument("--astra-system", metavar="S.json", help="ASTRA-sim system file")
    p.add_argument(
        "--comm-group",
        metavar="G.json",
        help='ASTRA-sim comm-group file {"<pg_name>": [ranks]} (default: PREFIX.comm_group.json)',
    )


def apply_comm_groups(args: argparse.Namespace, wl: Any) -> None:
    """Replace the workload's process groups by those of ``--comm-group``."""
    if args.comm_group:
        wl.groups = load_comm_groups(args.comm_group, wl.n_ranks)


def load_configs(args: argparse.Namespace) -> tuple[AstraNetwork | None, AstraSystem | None]:
    """The ASTRA-sim files given, checked against the model asked for."""
    astra = args.model != "genie"
    if astra and not (args.astra_network and args.astra_system):
        raise UsageError(
            f"--model {args.model} needs --astra-network N.yml and --astra-system S.json"
        )
    if bool(args.astra_network) != bool(args.astra_system):
        raise UsageError("give --astra-network and --astra-system together")
    if not args.astra_network:
        return None, None
    for flag, value in (
        ("--testbed", args.testbed),
        ("--topology", args.topology),
        ("--algorithm", args.algorithm),
        ("--chunks", args.chunks != 1 or None),
    ):
        if value:
            raise UsageError(f"{flag} is set by the ASTRA-sim files; give one or the other")
    if astra and (args.network != "analytical" or args.pricer != "programs"):
        raise UsageError(
            f"--model {args.model} is its own network backend; drop --network/--pricer"
        )
    return load_network(args.astra_network), load_system(args.astra_system)


def as_genie_model(args: argparse.Namespace, net: AstraNetwork, system: AstraSystem) -> list[str]:
    """Set genie's own model's options from the ASTRA-sim files; notes on what differs."""
    if net.dims != 1:
        raise ConfigError(
            f"{net.path}: key 'topology': genie's own model takes a 1-D network; this one has "
            f"{net.dims} dimensions (--model astra-unaware takes it)"
        )
    args.topology = _GENIE_TOPOLOGY[net.topology[0]]
    args.bandwidth = net.bandwidth[0] * 2**30
    args.latency = net.latency[0] * 1e-9
    args.chunks = system.splits
    notes, algos = [], []
    for coll, impls in system.implementations.items():
        algo = impls[0].algorithm
        if coll == "all_to_all" and algo == "ring":
            notes.append(
                f"{system.path}: {IMPLEMENTATION_KEYS[coll]} ring has no genie program; genie's "
                "own model runs all-to-all as direct"
            )
            algo = "direct"
        algos.append(f"{coll}={algo}")
    args.algorithm = ",".join(algos) or None
    return notes


def check_workload(wl: Any, net: AstraNetwork) -> None:
    """Errors for what ASTRA-sim's model of this network cannot run."""
    if wl.n_ranks != net.total_npus:
        raise ConfigError(
            f"{net.path}: key 'npus_count': the network has {net.total_npus} NPUs but the workload "
            f"{wl.n_ranks} ranks (ASTRA-sim runs one rank file per NPU)"
        )
    for rg in wl.ranks:
        for nd in rg.nodes:
            for a in nd.attrs:
                if a.name == "involved_dim" and not all(a.value or [True]):
                    raise ValidationError(
                        f"rank {rg.rank} node {nd.id} {nd.name!r}: involved_dim leaves out "
                        "dimensions; genie's ASTRA-sim model involves every dimension"
                    )


def replayed_durations(wl: Any, cw: Any) -> dict[tuple[int, int], int]:
    """ns each member of a broadcast takes (ASTRA-sim replays its duration; 0 -> 1 ns)."""
    from genie.vocabulary import CollectiveType

    out: dict[tuple[int, int], int] = {}
    ins = cw.instances
    for iid, ctype in enumerate(ins.comm_type.tolist()):
        if ctype == int(CollectiveType.BROADCAST):
            for r, i in ins.members[iid]:
                out[(iid, r)] = max(1, int(wl.ranks[r].nodes[i].duration_micros) * 1000)
    return out


def astra_backend(
    args: argparse.Namespace, wl: Any, cw: Any, net: AstraNetwork, system: AstraSystem
):
    """The ``--model astra-*`` backend for compiled workload ``cw``."""
    from genie.sim.astra_model import AstraBackend
    from genie.sim.astra_plan import check_collective
    from genie.sim.symmetry import representatives

    check_workload(wl, net)
    for kind in sorted(set(cw.instances.comm_type.tolist())):
        check_collective(kind)
    symmetric = not args.no_symmetry and representatives(cw) is not None
    return AstraBackend(
        net,
        system,
        aware=args.model == "astra-aware",
        group_names=list(cw.group_names),
        durations=replayed_durations(wl, cw),
        per_member=not symmetric,
    )
