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
"""

from __future__ import annotations

from collections.abc import Iterator

from genie.collectives.topology import flow_hash

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


def channel_streams(channel: int, streams: int, channels: int) -> range:
    """The stream indices of connection set ``channel`` of a rank pair's ``streams``."""
    flows = streams // max(1, channels)
    return range(channel * flows, (channel + 1) * flows)
