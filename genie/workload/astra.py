"""ASTRA-sim 2.0 as a target: the rules its workload layer applies, and workloads that keep them.

What ``astra-sim/workload/Workload.cc`` (and Chakra's feeder under it) does with a trace, as
measured against its analytical binaries:

* ``pg_name`` goes through ``std::stoi``: a name that is not an integer aborts the run; ``""``
  and ``"0"`` mean every rank; any other name must be a key of the comm-group JSON file
  (``--comm-group-configuration``), whose keys are parsed the same way and must be above 0.
* collectives: ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL run on the network;
  BROADCAST is replayed as the node's duration (1 ns when 0 us), moving no data; every other
  type (REDUCE, GATHER, SCATTER, BARRIER, REDUCE_SCATTER_BLOCK) aborts it.
* a COMM node with ``is_cpu_op`` true aborts it ("Comm node should not be on CPU").
* a send needs ``comm_dst`` and ``comm_tag`` (``comm_src``, if present, is the rank itself); a
  receive needs ``comm_src`` and ``comm_tag``; both need ``comm_size``.
* every data_dep and ctrl_dep must name a node of the file (it schedules on both), and some
  node must have none.
* a rank must not run one collective type in two process groups smaller than the world: the
  plan of each such group deletes the rank's shared implementation objects, so the run crashes
  ("double free or corruption") once the first rank finishes (CommunicatorGroup.cc,
  ``get_collective_plan`` with ``should_be_removed``; CollectivePlan.cc destructor).

``to_integer_groups`` renames a workload's process groups ``1..k`` (keeping the readable names
as ``pg_desc:<k>`` GlobalMetadata attrs in the files of the group's members, shown by
``inspect`` and in simulation reports), which is how ``genie workload generate`` writes by
default; ``astra_problems`` lists what ASTRA-sim would refuse in a workload.
"""

from __future__ import annotations

from genie.workload.loader import DESC_ATTR_PREFIX, GROUP_ATTR_PREFIX, member_group_attrs
from genie.workload.model import DEFAULT_GROUP, Attr, CollectiveType, NodeType, Workload

#: Collective types ASTRA-sim 2.0 runs on its network.
RUNNABLE = (
    CollectiveType.ALL_REDUCE,
    CollectiveType.ALL_GATHER,
    CollectiveType.REDUCE_SCATTER,
    CollectiveType.ALL_TO_ALL,
)


def why_not(ctype: int) -> str | None:
    """What ASTRA-sim does with a collective type it does not run, or None if it runs it."""
    if ctype in RUNNABLE:
        return None
    if ctype == CollectiveType.BROADCAST:
        return "replays it as the node's duration and moves no data"
    return "aborts (Unsupported collective comm type)"


def to_integer_groups(wl: Workload) -> Workload:
    """Rename the named process groups ``1..k`` in first-use order; readable names kept."""
    order: dict[str, None] = {}
    for rg in wl.ranks:
        for n in rg.nodes:
            if n.type == NodeType.COMM_COLL_NODE and n.pg_name:
                order.setdefault(n.pg_name)
    for g in wl.groups:
        if g != DEFAULT_GROUP:
            order.setdefault(g)
    new = {old: str(k) for k, old in enumerate(order, start=1)}
    groups = {DEFAULT_GROUP: wl.groups[DEFAULT_GROUP]} if DEFAULT_GROUP in wl.groups else {}
    groups.update({new[g]: wl.groups[g] for g in order if g in wl.groups})
    desc = {k: Attr(DESC_ATTR_PREFIX + k, "string_val", old) for old, k in new.items()}
    own = member_group_attrs(groups, wl.n_ranks, lambda k: [desc[k]] if k in desc else [])
    # a name used without known members: its readable name goes to every rank, as before
    unknown = [a for k, a in desc.items() if k not in groups]
    for rg in wl.ranks:
        for n in rg.nodes:
            if n.type == NodeType.COMM_COLL_NODE and n.pg_name:
                n.set_attr("pg_name", "string_val", new[n.pg_name])
        attrs = [
            a
            for a in rg.metadata.attrs
            if not a.name.startswith((GROUP_ATTR_PREFIX, DESC_ATTR_PREFIX))
        ]
        attrs += own[rg.rank] if 0 <= rg.rank < len(own) else []
        attrs += unknown
        rg.metadata.attrs = attrs
    wl.groups = groups
    wl.group_desc = {k: old for old, k in new.items()}
    return wl


def _types_in_two_subgroups(wl: Workload) -> tuple[int, int, list[str]] | None:
    """(rank, type, groups) of the first rank running a type in two groups below the world."""
    world = set(range(wl.n_ranks))
    sub = {g for g, m in wl.groups.items() if g not in ("", "0") and set(m) != world}
    for rg in wl.ranks:
        seen: dict[int, list[str]] = {}
        for n in rg.nodes:
            g = n.pg_name
            if n.type == NodeType.COMM_COLL_NODE and g in sub and n.comm_type is not None:
                gs = seen.setdefault(n.comm_type, [])
                if g not in gs:
                    gs.append(g)
                    if len(gs) == 2:
                        return rg.rank, n.comm_type, gs
    return None


def _is_int_name(name: str) -> bool:
    return name.isascii() and name.isdigit()


def astra_problems(wl: Workload) -> list[str]:
    """What in ``wl`` ASTRA-sim 2.0 would refuse or run differently (see the module docstring)."""
    out: list[str] = []
    bad_names = sorted(g for g in wl.groups if g and not _is_int_name(g))
    if bad_names:
        out.append(f"process-group names are not integers: {bad_names[:5]}")
    types: dict[int, int] = {}
    cpu_comm = 0
    for rg in wl.ranks:
        for n in rg.nodes:
            if n.type == NodeType.COMM_COLL_NODE and n.comm_type is not None:
                types[n.comm_type] = types.get(n.comm_type, 0) + 1
            if n.type in (
                NodeType.COMM_COLL_NODE,
                NodeType.COMM_SEND_NODE,
                NodeType.COMM_RECV_NODE,
            ):
                cpu_comm += n.is_cpu_op
    for t, count in sorted(types.items()):
        why = why_not(t)
        if why:
            name = CollectiveType(t).name if t in CollectiveType._value2member_map_ else str(t)
            out.append(f"{count} {name} node(s): ASTRA-sim {why}")
    if cpu_comm:
        out.append(f"{cpu_comm} communication node(s) with is_cpu_op = true: ASTRA-sim aborts")
    shared = _types_in_two_subgroups(wl)
    if shared:
        r, t, gs = shared
        out.append(
            f"rank {r} runs {CollectiveType(t).name} in process groups {gs}, both smaller than "
            "the world: ASTRA-sim 2.0 crashes (double free)"
        )
    d = wl.dropped
    missing = d.get("ctrl_deps_to_missing_ids", 0)
    selfs = d.get("ctrl_deps_to_self", 0) + d.get("data_deps_to_self", 0)
    if missing:
        out.append(f"{missing} ctrl_deps to missing ids: ASTRA-sim aborts")
    if selfs:
        out.append(f"{selfs} dependencies of a node on itself: ASTRA-sim never runs that node")
    ctrl = sum(len(n.ctrl_deps) for rg in wl.ranks for n in rg.nodes) + d.get(
        "ctrl_deps_forward", 0
    )
    if ctrl:
        out.append(f"{ctrl} ctrl_deps: ASTRA-sim waits on them, genie schedules on data_deps only")
    return out
