"""What a user asks genie to do, as frozen, typed values: fabric, model, workload, experiment.

Every spec is a ``msgspec.Struct`` (frozen, keyword-only, unknown fields refused), so it can be
built in Python, read from JSON or TOML (``from_dict``), and written back (``to_dict``). Numbers
with units are bytes, bytes/s and seconds; where a field says ``float | str`` a string with its
unit is read too (``"100gbit"``, ``"50GiB/s"``, ``"500ns"``, ``"2:1"``), so a notebook can say
what a paper says. The CLI builds these from its options (``genie.commands``); ``genie.api``'s
functions take them.
"""

from __future__ import annotations

from typing import Literal, TypeVar

import msgspec

from genie.errors import UnitError, UsageError
from genie.units import parse_bandwidth, parse_duration, parse_ratio

Topology = Literal["switch", "fully_connected", "ring", "leaf_spine"]
TOPOLOGIES: tuple[str, ...] = ("switch", "fully_connected", "ring", "leaf_spine")
MODELS: tuple[str, ...] = ("genie", "astra-unaware", "astra-aware")

S = TypeVar("S", bound="Spec")

# ``genie.store.DEFAULT_STORE`` (tests/test_simulate_startup.py checks they agree): the store
# module (sqlite3 and a run store's 30 KB of source) stays out of a simulate's imports
DEFAULT_STORE = "genie-runs.sqlite"


class Spec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every spec: conversion to and from plain data."""

    def to_dict(self) -> dict[str, object]:
        """The spec as plain data (what ``from_dict`` reads back)."""
        out: dict[str, object] = msgspec.to_builtins(self)
        return out

    @classmethod
    def from_dict(cls: type[S], data: dict[str, object]) -> S:
        """A spec from plain data (JSON, TOML); a wrong field is a one-line UsageError."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise UsageError(f"{cls.__name__}: {exc}") from None

    def replace(self: S, **changes: object) -> S:
        """A copy with ``changes`` (specs are frozen)."""
        return msgspec.structs.replace(self, **changes)


def bandwidth(value: float | str) -> float:
    """Bytes/s from a number (bytes/s) or a string with its unit."""
    if isinstance(value, str):
        return parse_bandwidth(value)
    if isinstance(value, bool) or not 0 < float(value) < float("inf"):
        raise UnitError(f"bandwidth must be a positive number of bytes/s, got {value!r}")
    return float(value)


def seconds(value: float | str) -> float:
    """Seconds from a number or a string with its unit."""
    return parse_duration(value)


def ratio(value: float | str) -> float:
    """A ratio from a number or ``"2:1"``."""
    return parse_ratio(value)


class Fabric(Spec, frozen=True, kw_only=True):
    """The network a workload runs on: a testbed file, or a target topology built from numbers.

    With ``testbed`` the topology, links and rank slots are the file's; otherwise ``topology``
    (default switch) with ``bandwidth`` and ``latency`` per link, priced as given unless
    ``headers`` (``tcp``, ``tcp6``, ``rocev2``) takes that stack's headers per ``mtu``-byte packet
    off (a testbed's own transport and MTU decide for it). ``placement``: ``testbed``,
    ``packed`` or ``round-robin`` (``genie.placement``; default: ``testbed`` with a testbed file,
    else ``packed``). ``calibration``: a stored calibration id, ``latest`` or ``none``.
    """

    testbed: str | None = None
    topology: Topology | None = None
    bandwidth: float | str = "50GiB/s"
    latency: float | str = "500ns"
    ranks_per_host: int = 1
    placement: str | None = None
    intra_bandwidth: float | str | None = None
    intra_latency: float | str = 0.0
    leaves: int = 2
    spines: int = 1
    oversubscription: float | str = 1.0
    routing: Literal["ecmp", "spray", "pinned"] | None = None
    channels: int | None = None
    qps: int | None = None
    ecmp_seed: int | None = None
    headers: Literal["none", "tcp", "tcp6", "rocev2"] = "none"
    mtu: int = 1500
    calibration: str = "none"


class Model(Spec, frozen=True, kw_only=True):
    """How communication is priced: genie's model (its pricer, algorithms, chunks) or ASTRA-sim's.

    ``algorithm``: one for every collective offering it (``ring``) or per collective
    (``all_reduce=ring,all_to_all=direct``). ``comm_concurrency``: collectives of one process
    group in flight at once (1: NCCL's issue order). ``kind`` ``astra-unaware``/``astra-aware``
    prices as ASTRA-sim 2.0's analytical backends, from its network and system files.
    ``collective_model``: ``nccl`` (``genie.collectives.nccl_model``: NCCL's algorithm and
    protocol choice, latencies and protocol limits; ``gpu`` a preset such as ``h100``,
    ``nccl_algo`` / ``nccl_proto`` force choices as ``NCCL_ALGO`` / ``NCCL_PROTO`` do,
    ``nccl_version`` the NCCL release whose tuner constants price it, default the latest),
    ``line-rate`` (step programs at line rate), or ``auto``: ``simulate`` takes ``nccl`` unless
    ``algorithm``, the builtin pricer or an ASTRA-sim model asks for step programs of one's own
    choosing (``resolve_collective_model``); everything else (emulate, bench: CPU agents, not
    GPUs) takes ``line-rate``. ``trace_edges``: ``inferred`` replays PyTorch-derived traces with
    CUDA stream and ProcessGroupNCCL semantics (``genie.workload.stream_rules``), ``explicit``
    with the trace's data_deps only.
    """

    kind: Literal["genie", "astra-unaware", "astra-aware"] = "genie"
    pricer: Literal["programs", "builtin"] = "programs"
    algorithm: str | None = None
    chunks: int = 1
    comm_concurrency: int = 1
    astra_network: str | None = None
    astra_system: str | None = None
    comm_group: str | None = None
    collective_model: Literal["auto", "line-rate", "nccl"] = "auto"
    gpu: str | None = None
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    nccl_version: str | None = None
    trace_edges: Literal["inferred", "explicit"] = "inferred"


class Compute(Spec, frozen=True, kw_only=True):
    """How compute nodes take time: as the trace says, or a roofline of the device."""

    mode: Literal["trace", "roofline"] = "trace"
    peak_flops: float | None = None
    efficiency: float = 1.0
    memory_bandwidth: float | str | None = None


class Perturb(Spec, frozen=True, kw_only=True):
    """Stragglers and jitter on compute (``genie.sim.perturb``).

    ``stragglers``: ``"RANK=FACTOR"`` items (``"3=1.5"``, ``"8-11=1.2"``); ``jitter``:
    ``"lognormal:5%"``; ``file``: a TOML file with seed, jitter and ``[slowdown]``.
    """

    stragglers: tuple[str, ...] = ()
    jitter: str | None = None
    seed: int | None = None
    file: str | None = None


class Job(Spec, frozen=True, kw_only=True):
    """One job of several on one fabric: its workload, hosts, start offset and name."""

    workload: str
    hosts: str | None = None  # host indices, "0-3" or "0,2,4" (default: the next free hosts)
    start: float | str = 0.0  # seconds after the first job
    name: str | None = None  # default: the workload's file name


class SimulateSpec(Spec, frozen=True, kw_only=True):
    """Replay a workload (or several jobs) over network models: ``genie.api.simulate``.

    ``network``: backends side by side: ``analytical`` and ``measured:RUN_ID`` (times a ``genie
    bench`` run measured) or ``measured:FILE.json``. ``sharing``: measured instances in flight
    together slow each other as the model says. ``store``: the run store (default genie's).
    """

    workload: str = ""
    jobs: tuple[Job, ...] = ()
    fabric: Fabric = Fabric()
    model: Model = Model()
    compute: Compute = Compute()
    perturb: Perturb = Perturb()
    network: tuple[str, ...] = ("analytical",)
    symmetry: bool = True
    sharing: bool = True
    store: str | None = None

    def workloads(self) -> list[str]:
        """The workload of every job (one for a single workload)."""
        if self.jobs:
            if self.workload:
                raise UsageError("give a workload or jobs, not both")
            return [j.workload for j in self.jobs]
        if not self.workload:
            raise UsageError("no workload: give a workload prefix (or jobs)")
        return [self.workload]


class EmulateSpec(Spec, frozen=True, kw_only=True):
    """Run a workload's communication on a testbed's agents and replay it: ``genie.api.emulate``.

    ``mode`` ``overlapped`` runs every rank's op list with the compute gaps honoured, so what
    overlaps in the trace overlaps on the wire; ``isolated`` measures each distinct collective
    alone. ``streams``: TCP connections per rank pair (default the testbed's flows).
    ``dilation`` K: compute gaps x K on the wire, every time reported / K. ``faults``: a link
    fault schedule (``genie.faults``). ``trace``: write a Chrome-trace timeline there.
    """

    testbed: str
    workload: str = ""
    jobs: tuple[Job, ...] = ()
    mode: Literal["overlapped", "isolated"] = "overlapped"
    iterations: int = 5
    warmup: int = 2
    placement: str = "testbed"
    ranks_per_host: int = 1
    algorithm: str | None = None
    chunks: int = 1
    comm_concurrency: int = 1
    streams: int | None = None
    max_collectives: int = 64
    max_instances: int = 0  # refuse workloads with more communication instances (0: no cap)
    congestion: str | None = None  # TCP congestion control (None: the testbed's [tcp])
    # overlapped: "lean" sends pattern bytes from a fixed region per rank (memory that does not
    # grow with message sizes); "real" computes each collective in buffers of its own
    payload: Literal["lean", "real"] = "lean"
    dilation: float = 1.0
    calibration: str = "none"
    perturb: Perturb = Perturb()
    faults: str | None = None
    store: str | None = DEFAULT_STORE  # None: do not record the runs
    symmetry: bool = True
    trace: str | None = None
    command: str = "genie emulate"  # what the run store records as the command

    def workloads(self) -> list[str]:
        """The workload of every job (one for a single workload)."""
        return SimulateSpec(workload=self.workload, jobs=self.jobs).workloads()
