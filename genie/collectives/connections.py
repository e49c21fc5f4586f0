"""The TCP connections genie's data plane opens per rank pair, as rules both sides share.

The agent (``genie_agent.dataplane.tcp``) opens them and the controller and the model need the
same rules to know which flow carries which bytes:

* a rank pair has ``streams`` connections, in ``channels`` equal sets; a program sends on its
  channel's set (``channel_streams``), as NCCL gives each communicator connections of its own;
* connection ``stream`` of rank pair (src, dst) leaves from a source port fixed per flow
  (``source_ports``: the first one free of a short sequence), so a fabric hashing the 5-tuple
  (ECMP) puts a job's flows on the same paths every run, and its paths can be read before a byte
  moves;
* a message is cut into parts, one per stream of its set, each at least ``min_part`` bytes
  (``split_parts``): a small message uses only the first streams of its set.

``FlowPaths`` holds the paths a fabric gives these connections (learned from it, e.g. by
``genie.testbed.flows.kernel_paths``), for the model to load the links the wire loads
(``genie.collectives.topology.Topology.with_paths``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from genie.collectives.program import Op, Program
from genie.collectives.topology import flow_hash
from genie.wire.messages import DataOptions

# Source ports of data connections: fixed per flow. 20000..32767 lies below Linux's ephemeral
# range (32768..60999), where the listeners' and other programs' ports come from.
SOURCE_PORT_BASE = 20000
SOURCE_PORT_SPAN = 12768
SOURCE_PORT_TRIES = 16  # then the kernel picks one


def source_ports(src: int, dst: int, stream: int) -> Iterator[int]:
    """The source ports connection ``stream`` of rank pair (src, dst) tries, in order."""
    first = flow_hash(src, dst, stream) % SOURCE_PORT_SPAN
    for j in range(SOURCE_PORT_TRIES):
        yield SOURCE_PORT_BASE + (first + j) % SOURCE_PORT_SPAN


def part_count(nbytes: float, streams: int, min_part: int) -> int:
    """How many parts (streams) a message of ``nbytes`` is cut into (``split_parts``)."""
    return max(1, min(streams, int(nbytes) // max(1, min_part)))


def split_parts(nbytes: int, streams: int, min_part: int) -> list[tuple[int, int]]:
    """Cut a message into (offset, length) parts, one per stream, each at least ``min_part``."""
    k = part_count(nbytes, streams, min_part)
    base, extra = divmod(nbytes, k)
    parts, off = [], 0
    for i in range(k):
        ln = base + (1 if i < extra else 0)
        parts.append((off, ln))
        off += ln
    return parts


def part_streams(nparts: int, flows: int, seq: int) -> list[int]:
    """The streams (indices within its set of ``flows``) the parts of a message go on: part k
    on stream k when it is cut into several, a whole one on stream ``seq % flows`` (messages
    of one rank pair take turns; ``seq``: the message's number), as
    ``genie_agent.dataplane.tcp_engine`` sends them."""
    if nparts > 1:
        return [k % flows for k in range(nparts)]
    return [seq % flows]


def channel_streams(channel: int, streams: int, channels: int) -> range:
    """The stream indices of connection set ``channel`` of a rank pair's ``streams``."""
    flows = streams // max(1, channels)
    return range(channel * flows, (channel + 1) * flows)


def pair_channels(
    programs: Sequence[Program], channels: Sequence[int] = ()
) -> dict[tuple[int, int], set[int]]:
    """(lower global rank, higher) -> the connection sets its bytes take: the channel of every
    program that sends between the two (``channels[p]``, absent: 0)."""
    out: dict[tuple[int, int], set[int]] = {}
    for p, prog in enumerate(programs):
        c = channels[p] if p < len(channels) else 0
        spec = prog.spec
        for r in range(spec.n_ranks):
            a = spec.global_rank(r)
            for st in prog.steps(r):
                if st.op == Op.SEND and st.peer >= 0:
                    b = spec.global_rank(st.peer)
                    if a != b:
                        out.setdefault((min(a, b), max(a, b)), set()).add(c)
    return out


Path = tuple[int, ...]  # link ids of a topology, in order


@dataclass(frozen=True)
class FlowPaths:
    """The paths a fabric gives the connections genie opens, learned from the fabric.

    ``paths[(src rank, dst rank)]``: per connection set (channel) the pair's bytes take, the path
    of each of its streams in stream order, for bytes from ``src`` to ``dst`` (a connection
    carries data both ways, each way on the path the fabric gives that direction's 5-tuple).
    A message between the pair is cut as the agent cuts it (``split_parts``: the first
    ``part_count`` streams of a set, an equal part each; a message sent whole takes the
    streams in turn (``part_streams``), so its bytes are spread over all of them), its bytes
    split evenly over the sets.
    ``source`` says where the paths come from, for reports.
    """

    paths: Mapping[tuple[int, int], tuple[tuple[Path, ...], ...]]
    source: str
    min_part: int = DataOptions().min_part

    def parts(self, src: int, dst: int, nbytes: float | None = None) -> int | None:
        """How many streams of each set a message of ``nbytes`` from ``src`` to ``dst`` uses
        (all for None); None when the pair's paths are not known."""
        sets = self.paths.get((src, dst))
        if not sets or not sets[0]:
            return None
        flows = len(sets[0])
        return flows if nbytes is None else part_count(nbytes, flows, self.min_part)

    def shares(self, src: int, dst: int, parts: int) -> list[tuple[Path, float]]:
        """(path, share of the message's bytes) of each stream a message of ``parts`` parts
        from ``src`` to ``dst`` takes (a whole message: every stream in turn, on average)."""
        sets = self.paths[(src, dst)]
        out = []
        for s in sets:
            used = s if parts == 1 else s[:parts]
            out += [(p, 1.0 / (len(sets) * len(used))) for p in used]
        return out

    def describe(self) -> str:
        """One phrase for reports: where the paths come from and how many flows they cover."""
        n = sum(len(s) for sets in self.paths.values() for s in sets)
        return f"{self.source} ({n} flows of {len(self.paths)} rank pairs)"
