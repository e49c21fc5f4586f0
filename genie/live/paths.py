"""Which paths the model prices a live run on: the fabric's own, learned while the job runs.

On a netns fabric whose switches hash flows over equal-cost paths, the paths of the job's
connections are read from the switches once the connections are up
(``genie.testbed.flows.kernel_paths``; ``learn_paths`` during an emulate run, ``probe_paths``
before a bench sweep) and the models the run is compared with price every rank pair on them
(``Topology.with_paths``); on a lab testbed its path map (``[routing] paths``) or else the
model's own hash stands. Either way the run's notes say which applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from genie.collectives.connections import FlowPaths, pair_channels
from genie.collectives.program import Program
from genie.collectives.topology import Topology
from genie.controller.session import Controller
from genie.errors import GenieError
from genie.live.compare import Models
from genie.live.plan import OpListPlan
from genie.testbed import flows
from genie.testbed.model import Testbed
from genie.wire.messages import DataOptions

OWN_HASH = "the model's own ECMP hash"


def learn_paths(
    tb: Testbed,
    topology: object,
    rank_endpoints: Sequence[str],
    plan: OpListPlan,
    options: DataOptions,
) -> tuple[FlowPaths | None, str | None]:
    """(paths, note) for a job whose connections are up: the fabric's where ``tb`` is a netns
    fabric with a choice of paths, else none (the note then says what the model's paths are
    where they depend on the flow: the testbed's path map, or the model's own hash); a failure
    to read them is a note, not an error."""
    if not flows.has_choices(tb):
        return None, _static_note(tb, topology)
    try:
        paths = flows.kernel_paths(
            tb,
            topology,
            rank_endpoints,
            options.streams,
            options.channels,
            pair_channels(plan.programs, plan.channels),
            options.min_part,
        )
    except GenieError as exc:
        return None, f"model paths: {OWN_HASH} (the fabric's could not be read: {exc})"
    return paths, f"model paths: {paths.describe()}"


def probe_paths(
    ctl: Controller,
    tb: Testbed,
    topology: Topology,
    program: Program,
    placement: Sequence[str],
    options: DataOptions,
) -> tuple[FlowPaths | None, str | None]:
    """(paths, note) for a sweep whose programs all open the same connections (one placement,
    one set of streams): on a netns fabric with a choice of paths, ``program`` is prepared,
    the paths its connections take are read, and it is released (no Go); else as
    ``learn_paths`` says without preparing anything."""
    if options.transport != "tcp" or not flows.has_choices(tb):
        return None, _static_note(tb, topology)
    ctl.prepare([program], list(placement), options)
    try:
        ends = tb.rank_endpoints(placement)
        try:
            paths = flows.kernel_paths(
                tb, topology, ends, options.streams, options.channels,
                pair_channels([program]), options.min_part,
            )  # fmt: skip
        except GenieError as exc:
            return None, f"model paths: {OWN_HASH} (the fabric's could not be read: {exc})"
        return paths, f"model paths: {paths.describe()}"
    finally:
        ctl.release()


def with_paths(models: Models, paths: FlowPaths | None) -> Models:
    """``models`` pricing on ``paths`` (unchanged for None)."""
    if paths is None:
        return models
    return dataclasses.replace(
        models,
        nominal=models.nominal.with_paths(paths),
        calibrated=None if models.calibrated is None else models.calibrated.with_paths(paths),
        lab=models.lab.with_paths(paths),
    )


def _static_note(tb: Testbed, topology: object) -> str | None:
    """What the model's paths are on a testbed genie cannot read them from."""
    routing = tb.routing
    if routing.paths:
        from genie.testbed.pathmap import read_path_map

        try:
            source = read_path_map(routing.paths).get("source", "")
        except GenieError:
            source = ""
        return (
            f"model paths: the testbed's path map {routing.paths}"
            + (f" ({source})" if source else "")
            + "; host pairs it does not list: "
            + (OWN_HASH if routing.policy == "ecmp" else routing.describe())
        )
    if tb.kind == "netns":  # bridged, or routed with one path per pair: nothing to choose
        return None
    if getattr(topology, "routes_by_rank", False) and routing.policy == "ecmp":
        return (
            f"model paths: {OWN_HASH} ([routing] paths = FILE gives the fabric's own, "
            "genie.testbed.pathmap)"
        )
    return None
