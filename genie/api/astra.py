"""ASTRA-sim's configurations in a simulation: its network, system and comm-group files, and
the ``astra-unaware``/``astra-aware`` backends that price as ASTRA-sim 2.0's analytical ones.

With genie's own model (``Model.kind == "genie"``) the ASTRA-sim files set genie's model instead:
a 1-D network's building block becomes genie's topology (Ring -> ring, Switch -> switch,
FullyConnected -> fully_connected) with its bandwidth (2^30 B/s) and latency per link, each
collective's first implementation its algorithm, and ``preferred-dataset-splits`` the chunks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from genie.api.specs import Model, SimulateSpec
from genie.errors import ConfigError, UsageError, ValidationError

if TYPE_CHECKING:  # imported where used: genie's own model without ASTRA-sim files loads none
    from genie.sim.astra_config import AstraNetwork, AstraSystem  # (start-up, issue 33)
    from genie.sim.astra_model import AstraBackend
    from genie.sim.compiled import CompiledWorkload
    from genie.workload.model import Workload

log = logging.getLogger(__name__)

_GENIE_TOPOLOGY = {"Ring": "ring", "Switch": "switch", "FullyConnected": "fully_connected"}


def apply_comm_groups(model: Model, wl: Workload) -> None:
    """Replace the workload's process groups by those of ``--comm-group``."""
    if model.comm_group:
        from genie.sim.astra_config import load_comm_groups

        wl.groups = load_comm_groups(model.comm_group, wl.n_ranks)


def load_configs(spec: SimulateSpec) -> tuple[AstraNetwork | None, AstraSystem | None]:
    """The ASTRA-sim files given, checked against the model asked for."""
    m, f = spec.model, spec.fabric
    astra = m.kind != "genie"
    if astra and not (m.astra_network and m.astra_system):
        raise UsageError(f"--model {m.kind} needs --astra-network N.yml and --astra-system S.json")
    if bool(m.astra_network) != bool(m.astra_system):
        raise UsageError("give --astra-network and --astra-system together")
    if not m.astra_network or not m.astra_system:
        return None, None
    for flag, value in (
        ("--testbed", f.testbed),
        ("--topology", f.topology),
        ("--algorithm", m.algorithm),
        ("--chunks", m.chunks != 1 or None),
    ):
        if value:
            raise UsageError(f"{flag} is set by the ASTRA-sim files; give one or the other")
    if astra and (list(spec.network) != ["analytical"] or m.pricer != "programs"):
        raise UsageError(f"--model {m.kind} is its own network backend; drop --network/--pricer")
    from genie.sim.astra_config import load_network, load_system

    return load_network(m.astra_network), load_system(m.astra_system)


def as_genie_model(
    spec: SimulateSpec, net: AstraNetwork, system: AstraSystem
) -> tuple[SimulateSpec, list[str]]:
    """``spec`` with genie's own model set from the ASTRA-sim files; notes on what differs."""
    from genie.sim.astra_config import IMPLEMENTATION_KEYS

    if net.dims != 1:
        raise ConfigError(
            f"{net.path}: key 'topology': genie's own model takes a 1-D network; this one has "
            f"{net.dims} dimensions (--model astra-unaware takes it)"
        )
    fabric = spec.fabric.replace(
        topology=_GENIE_TOPOLOGY[net.topology[0]],
        bandwidth=net.bandwidth[0] * 2**30,
        latency=net.latency[0] * 1e-9,
    )
    notes: list[str] = []
    algos: list[str] = []
    for coll, impls in system.implementations.items():
        algo = impls[0].algorithm
        if coll == "all_to_all" and algo == "ring":
            notes.append(
                f"{system.path}: {IMPLEMENTATION_KEYS[coll]} ring has no genie program; genie's "
                "own model runs all-to-all as direct"
            )
            algo = "direct"
        algos.append(f"{coll}={algo}")
    model = spec.model.replace(chunks=system.splits, algorithm=",".join(algos) or None)
    return spec.replace(fabric=fabric, model=model), notes


def check_workload(wl: Workload, net: AstraNetwork) -> None:
    """Errors for what ASTRA-sim's model of this network cannot run."""
    if wl.n_ranks != net.total_npus:
        raise ConfigError(
            f"{net.path}: key 'npus_count': the network has {net.total_npus} NPUs but the workload "
            f"{wl.n_ranks} ranks (ASTRA-sim runs one rank file per NPU)"
        )
    for rg in wl.ranks:
        for nd in rg.nodes:
            # a reader keeps attrs as their bytes until asked: without the name, no such attr
            # (decoding every node's attrs here cost ~3 s of llm at 4,096 ranks; issue 33)
            raw = nd._attrs
            if type(raw) is bytes and b"involved_dim" not in raw:
                continue
            for a in nd.attrs:
                if a.name == "involved_dim" and not all(a.value or [True]):
                    raise ValidationError(
                        f"rank {rg.rank} node {nd.id} {nd.name!r}: involved_dim leaves out "
                        "dimensions; genie's ASTRA-sim model involves every dimension"
                    )


def replayed_durations(wl: Workload, cw: CompiledWorkload) -> dict[tuple[int, int], int]:
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
    spec: SimulateSpec,
    wl: Workload,
    cw: CompiledWorkload,
    net: AstraNetwork,
    system: AstraSystem,
) -> AstraBackend:
    """The ``--model astra-*`` backend for compiled workload ``cw``."""
    from genie.sim.astra_model import AstraBackend
    from genie.sim.astra_plan import check_collective
    from genie.sim.symmetry import astra_symmetry_refusal, representatives

    check_workload(wl, net)
    for kind in sorted(set(cw.instances.comm_type.tolist())):
        check_collective(kind)
    aware = spec.model.kind == "astra-aware"
    symmetric = spec.symmetry and representatives(cw) is not None
    if symmetric and (why := astra_symmetry_refusal(cw, net, system, aware)) is not None:
        log.info("symmetric replay refused: %s", why)
        symmetric = False
    return AstraBackend(
        net,
        system,
        aware=aware,
        group_names=list(cw.group_names),
        durations=replayed_durations(wl, cw),
        per_member=not symmetric,
    )
