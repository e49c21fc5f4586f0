"""NIC and stack counters of one Go, as an agent reports them in its ``Result``.

An agent snapshots its counters before and after every Go, and every ``SAMPLE_S`` or so while a
long one runs (``genie_agent.counters``, ``genie_agent.counting``): the RDMA
device's port counters (``counters/*`` and ``hw_counters/*`` in sysfs: CNPs, ECN marks,
sequence errors, ACK timeouts, RNR retries, transmit wait...), its netdev's pause counters (from
``ethtool -S``: per priority and the global ones) and, on TCP runs, the stack's counters of its
network namespace (``/proc/net/snmp`` and ``/proc/net/netstat``). A ``CounterSet`` carries one
source's deltas over the Go, by the counter's own name: names genie knows nothing about are kept.

A peer's counters are bounded and checked when the frame is decoded (msgspec constraints): at
most ``MAX_SOURCES`` sets of at most ``MAX_COUNTERS`` names each, every name and source matching
``NAME_PATTERN`` (no control character, at most ``MAX_NAME`` characters), every value an int in
0 .. 2^63-1; a long Go's samples at most ``MAX_SAMPLES`` of ``MAX_SAMPLE_COUNTERS`` names.
``HEADLINE`` lists what a person reads first; ``summary`` says it in one phrase.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated

import msgspec

MAX_SOURCES = 16  # counter sets of one agent's Result (devices' ports, netdevs, the stack)
MAX_COUNTERS = 256  # names of one set
MAX_NAME = 64  # characters of a counter or source name
MAX_VALUE = (1 << 63) - 1  # a delta fits SQLite's INTEGER
NAME_PATTERN = r"^[A-Za-z0-9_.:/+@-]{1,64}$"
SAMPLE_S = 1.0  # a Go still running after this long is sampled, and again every period
MAX_SAMPLES = 32  # samples of one set (a longer Go keeps every other one, then samples half as
# often)
MAX_SAMPLE_COUNTERS = 32  # names of one sample (what moved, headline names first)

Name = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN, max_length=MAX_NAME)]
Value = Annotated[int, msgspec.Meta(ge=0, le=MAX_VALUE)]
Deltas = Annotated[dict[Name, Value], msgspec.Meta(max_length=MAX_COUNTERS)]


SampleDeltas = Annotated[dict[Name, Value], msgspec.Meta(max_length=MAX_SAMPLE_COUNTERS)]


class CounterSample(msgspec.Struct, kw_only=True, array_like=True, forbid_unknown_fields=True):
    """A source's deltas so far, ``t_ms`` into a long Go (only what moved, bounded)."""

    t_ms: Value
    deltas: SampleDeltas = {}


class CounterSet(msgspec.Struct, kw_only=True, array_like=True, forbid_unknown_fields=True):
    """One source's counter deltas over one Go, and on a long Go how they grew.

    ``source``: ``rdma:DEV/PORT`` (sysfs port counters), ``ethtool:NETDEV`` (pause counters),
    ``tcp`` (the agent's network namespace's stack counters, nstat-style names such as
    ``TcpRetransSegs``, ``TcpExtTCPTimeouts``, ``IpExtInCEPkts``). ``samples``: snapshots
    taken while the Go ran (every ``SAMPLE_S`` or so, at most ``MAX_SAMPLES``), each the deltas
    since the Go's first snapshot."""

    source: Name
    deltas: Deltas = {}
    samples: Annotated[list[CounterSample], msgspec.Meta(max_length=MAX_SAMPLES)] = []


CounterSets = Annotated[list[CounterSet], msgspec.Meta(max_length=MAX_SOURCES)]

# what a person reads first, in order: (label, the names that count it, the first present
# taken: the RoCE NIC's ECN marks, else the IP layer's CE packets, else TCP's CE deliveries)
HEADLINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("CNPs sent", ("np_cnp_sent",)),
    ("CNPs handled", ("rp_cnp_handled",)),
    ("ECN-marked", ("np_ecn_marked_roce_packets", "IpExtInCEPkts", "TcpExtTCPDeliveredCE")),
    ("out of sequence", ("out_of_sequence", "out_of_seq_request")),  # mlx5, rxe
    ("sequence errors", ("packet_seq_err",)),
    ("ACK timeouts", ("local_ack_timeout_err",)),
    ("RNR retries", ("rnr_nak_retry_err",)),
    ("retransmits", ("TcpRetransSegs",)),
    ("timeouts", ("TcpExtTCPTimeouts",)),
    ("lost retransmits", ("TcpExtTCPLostRetransmit",)),
    ("SYN retransmits", ("TcpExtTCPSynRetrans",)),
    ("xmit-wait ticks", ("port_xmit_wait",)),
)
# a NIC's names that are errors however the driver spells them (summed as "errors"); the
# stack's own (``STACK_PREFIXES``) are read by name in ``HEADLINE`` instead
ERROR_WORDS = ("err", "discard", "drop")
STACK_PREFIXES = ("Tcp", "IpExt")


def is_pause_frames(name: str) -> bool:
    """True for an ethtool counter of pause frames (per priority or global), not a duration."""
    n = name.lower()
    return "pause" in n and "duration" not in n and "transition" not in n and "storm" not in n


def is_pause_duration(name: str) -> bool:
    """True for an ethtool counter of pause time in microseconds (mlx5: *_pause_duration)."""
    return name.lower().endswith("pause_duration")


def merge(sets: Iterable[CounterSet]) -> dict[str, int]:
    """All deltas of ``sets`` by name (a name in several sources is summed)."""
    out: dict[str, int] = {}
    for s in sets:
        for k, v in s.deltas.items():
            out[k] = out.get(k, 0) + v
    return out


def headline(deltas: Mapping[str, int]) -> dict[str, int]:
    """The headline figures of merged deltas: label -> count (only what is present), plus
    ``pause frames``, ``pause us`` and ``errors`` where counters of those kinds are."""
    out: dict[str, int] = {}
    for label, names in HEADLINE:
        present = [n for n in names if n in deltas]
        if present:
            out[label] = deltas[present[0]]
    frames = [v for k, v in deltas.items() if is_pause_frames(k)]
    if frames:
        out["pause frames"] = sum(frames)
    dur = [v for k, v in deltas.items() if is_pause_duration(k)]
    if dur:
        out["pause us"] = sum(dur)
    named = {n for _, names in HEADLINE for n in names}
    errs = [
        v
        for k, v in deltas.items()
        if k not in named
        and any(w in k.lower() for w in ERROR_WORDS)
        and not k.startswith(STACK_PREFIXES)
    ]
    if errs:
        out["errors"] = sum(errs)
    return out


def summary(deltas: Mapping[str, int]) -> str:
    """One phrase of the non-zero headline figures ("1,240 CNPs sent and 18 ms of pause");
    "" when nothing moved."""
    parts = []
    for label, v in headline(deltas).items():
        if not v:
            continue
        if label == "pause us":
            parts.append(
                f"{v / 1000:,.3g} ms of pause" if v < 10_000 else f"{v // 1000:,} ms of pause"
            )
        else:
            parts.append(f"{v:,} {label}")
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
