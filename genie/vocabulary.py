"""The collective vocabulary, in one place: Chakra's numbers, genie's names, nccl-tests factors.

Every package speaks of collectives through this module (workload, collectives, sim, report,
CLI), so a name, a number, a bus factor or a textbook formula exists once:

* ``CollectiveType``: Chakra's CollectiveCommType with its numbering (ALL_REDUCE is 0);
  ``chakra_type`` and ``chakra_name`` convert between numbers and Chakra's names in snake case
  (``P2P`` = -1 stands for a send/recv pair, named ``send_recv``).
* genie's *planned* names (``PLANNED``): what ``genie.collectives`` builds step programs for.
  ``canonical_collective`` maps any spelling (genie's, Chakra's name or number, camel or snake
  case, nccl-ish aliases) onto them; ``planned_name`` does it for a Chakra number and is where
  REDUCE_SCATTER_BLOCK becomes reduce_scatter.
* ``bus_factor``, ``algbw``, ``busbw``: nccl-tests' conventions.
* ``closed_form``: the textbook alpha-beta time of a (collective, algorithm), including the
  algorithms of the simulator's built-in traffic model (``TRAFFIC_ALGORITHM``).

This module imports nothing of genie's but the error tree, so every layer may import it.
"""

from __future__ import annotations

import enum
import math

from genie.errors import CollectiveError


class CollectiveType(enum.IntEnum):
    """Chakra's CollectiveCommType, with its numbering (ALL_REDUCE is 0)."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


#: The node attribute (int64 list) of an uneven all-to-all (all-to-all-v): the bytes the rank
#: sends to each rank of its group, in group order (its comm_size is then its own total).
UNEVEN_ATTR = "comm_split_sizes"

#: Chakra's names in snake case, indexed by the Chakra number.
CHAKRA_NAMES: tuple[str, ...] = tuple(t.name.lower() for t in CollectiveType)
P2P = -1  # the comm type of a send/recv instance (not a Chakra number)

#: The collectives genie plans as step programs (``genie.collectives.registry``).
PLANNED: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "all_to_all",
    "broadcast",
    "reduce",
    "send_recv",
)

#: Chakra number -> the planned collective it is run as; GATHER, SCATTER, BARRIER have none.
PLANNED_OF_CHAKRA: dict[int, str] = {
    CollectiveType.ALL_REDUCE: "all_reduce",
    CollectiveType.REDUCE: "reduce",
    CollectiveType.ALL_GATHER: "all_gather",
    CollectiveType.BROADCAST: "broadcast",
    CollectiveType.ALL_TO_ALL: "all_to_all",
    CollectiveType.REDUCE_SCATTER: "reduce_scatter",
    CollectiveType.REDUCE_SCATTER_BLOCK: "reduce_scatter",
}

_ALIASES = {
    "allreduce": "all_reduce",
    "reducescatter": "reduce_scatter",
    "reducescatterblock": "reduce_scatter",
    "allgather": "all_gather",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "send": "send_recv",
    "recv": "send_recv",
    "commsend": "send_recv",
    "commrecv": "send_recv",
    "p2p": "send_recv",
}

#: Algorithm spellings (any case, with or without ``_``/``-``) -> ASTRA-sim's spelling.
ALGORITHM_ALIASES = {
    "ring": "ring",
    "direct": "direct",
    "halvingdoubling": "halvingDoubling",
    "hd": "halvingDoubling",
    "rabenseifner": "halvingDoubling",
    "doublebinarytree": "doubleBinaryTree",
    "dbt": "doubleBinaryTree",
    "tree": "tree",
    "binomial": "tree",
    "binomialtree": "tree",
    "pairwise": "pairwise",
    "hierarchical": "hierarchical",
    "chain": "chain",
    "dissemination": "dissemination",
}

#: The algorithm the simulator's built-in traffic model (``genie.sim.traffic``) uses for each
#: Chakra collective: ring, direct, a pipelined chain from the root, dissemination.
TRAFFIC_ALGORITHM: dict[str, str] = {
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "reduce_scatter_block": "ring",
    "all_gather": "ring",
    "all_to_all": "direct",
    "broadcast": "chain",
    "reduce": "chain",
    "gather": "direct",
    "scatter": "direct",
    "barrier": "dissemination",
    "send_recv": "pairwise",
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "").replace("-", "")


def chakra_type(value: int | str) -> int:
    """A Chakra collective number from its number or its name (``all_reduce``, ``ALL_REDUCE``)."""
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        if key not in CHAKRA_NAMES:
            raise CollectiveError(f"unknown collective {value!r}; known: {', '.join(CHAKRA_NAMES)}")
        return CHAKRA_NAMES.index(key)
    v = int(value)
    if not 0 <= v < len(CHAKRA_NAMES):
        raise CollectiveError(f"collective type {v} outside Chakra's 0..{len(CHAKRA_NAMES) - 1}")
    return v


def chakra_name(ctype: int) -> str:
    """Chakra's name (snake case) of a collective number, ``send_recv`` for ``P2P``."""
    return "send_recv" if ctype == P2P else CHAKRA_NAMES[ctype]


def planned_name(ctype: int) -> str:
    """The planned collective a Chakra number (or ``P2P``) runs as; CollectiveError if none."""
    if ctype == P2P:
        return "send_recv"
    name = PLANNED_OF_CHAKRA.get(int(ctype))
    if name is None:
        raise CollectiveError(f"collective {chakra_name(ctype)} has no plan in genie")
    return name


def canonical_collective(name: str | int) -> str:
    """Map a collective name (genie's, Chakra's name or number, camel/snake case) to genie's."""
    if isinstance(name, int):
        if name not in PLANNED_OF_CHAKRA:
            raise CollectiveError(f"Chakra collective type {name} has no plan in genie")
        return PLANNED_OF_CHAKRA[name]
    key = _key(name)
    if key in ("gather", "scatter", "barrier"):
        raise CollectiveError(f"collective {name!r} has no plan in genie")
    out = _ALIASES.get(key)
    if out is None:
        raise CollectiveError(f"unknown collective {name!r}; known: {', '.join(PLANNED)}")
    return out


def display_name(name: str | int) -> str:
    """A collective's name for tables: planned names as they are, others in Chakra's spelling."""
    if isinstance(name, int):
        return chakra_name(name)
    key = _key(name)
    for chakra in CHAKRA_NAMES:
        if _key(chakra) == key:
            return chakra
    return _ALIASES.get(key, name)


def base_collective(name: str | int) -> str:
    """``display_name`` with REDUCE_SCATTER_BLOCK folded into reduce_scatter (the same traffic)."""
    out = display_name(name)
    return "reduce_scatter" if out == "reduce_scatter_block" else out


def formula(collective: str | int, algorithm: str | None) -> str:
    """The closed form of (collective, algorithm) in words ("" when there is none)."""
    name = base_collective(collective)
    algo = algorithm_spelling(algorithm) if algorithm else TRAFFIC_ALGORITHM.get(name)
    return FORMULA.get((name, algo or ""), "")


def algorithm_spelling(name: str) -> str | None:
    """ASTRA-sim's spelling of an algorithm name, or None when the name is unknown."""
    return ALGORITHM_ALIASES.get(_key(name))


# -- nccl-tests figures --------------------------------------------------------------------------


def bus_factor(collective: str | int, n: int) -> float:
    """nccl-tests' busbw factor: 2(n-1)/n all-reduce, (n-1)/n RS/AG/A2A/gather/scatter, 1 else.

    Barrier moves no bytes (0). Any Chakra or genie spelling is accepted.
    """
    if n < 1:
        raise CollectiveError(f"group size must be positive: {n}")
    name = display_name(collective)
    if name == "all_reduce":
        return 2 * (n - 1) / n
    if name in ("reduce_scatter", "reduce_scatter_block", "all_gather", "all_to_all"):
        return (n - 1) / n
    if name in ("gather", "scatter"):
        return (n - 1) / n
    if name == "barrier":
        return 0.0
    return 1.0


def algbw(size: float, t: float) -> float:
    """Algorithm bandwidth S / t in bytes/s (S the whole buffer, as nccl-tests)."""
    return size / t if t > 0 else math.inf


def busbw(collective: str | int, n: int, size: float, t: float) -> float:
    """Bus bandwidth: algbw times the nccl-tests factor, in bytes/s."""
    return algbw(size, t) * bus_factor(collective, n)


# -- closed forms --------------------------------------------------------------------------------

#: The closed forms in words, for tables.
FORMULA = {
    ("all_reduce", "ring"): "2(n-1)(alpha + S/(nB))",
    ("reduce_scatter", "ring"): "(n-1)(alpha + S/(nB))",
    ("all_gather", "ring"): "(n-1)(alpha + S/(nB))",
    ("all_to_all", "direct"): "alpha + (n-1)S/(nB)",
    ("broadcast", "chain"): "(n-1)alpha + S/B",
    ("reduce", "chain"): "(n-1)alpha + S/B",
    ("broadcast", "tree"): "ceil(log2 n)(alpha + S/B)",
    ("reduce", "tree"): "ceil(log2 n)(alpha + S/B)",
    ("gather", "direct"): "alpha + (n-1)S/(nB)",
    ("scatter", "direct"): "alpha + (n-1)S/(nB)",
    ("barrier", "dissemination"): "ceil(log2 n) alpha",
    ("send_recv", "pairwise"): "alpha + S/B",
}


def closed_form(
    collective: str | int,
    algorithm: str | None,
    n: int,
    size: int,
    bandwidth: float,
    latency: float,
    *,
    size_convention: str = "astra-sim",
    window: int | None = None,
    chunks: int = 1,
) -> float:
    """Textbook time (alpha-beta) of a collective: ``latency`` is per message end to end.

    ``chunks`` C pipelines a ring of k steps: chunk c enters a step as chunk c-1 leaves it, and
    a message's latency overlaps the next chunk's transmission, so
    T = max(k S/(nB) + a, k a + (k + C - 1) S/(nCB)): k + C - 1 stages of the C-times smaller
    message while latency dominates, the link's bytes plus one latency once it is saturated
    (C = 1 gives k(a + S/(nB))). Ring only; the others have no chunked closed form here.

    Ring all-reduce 2(n-1)(a + S/(nB)); ring reduce-scatter / all-gather (n-1)(a + S/(nB));
    halving-doubling (n a power of two) all-reduce 2 log2(n) a + 2 (n-1)/n S/B, reduce-scatter and
    all-gather half that; binomial broadcast / reduce ceil(log2 n)(a + S/B) and tree all-reduce
    twice that (exact for n a power of two: otherwise some children overlap); pipelined chain
    broadcast / reduce (n-1) a + S/B; direct all-to-all a + (n-1) S/(nB) whatever its window
    (a send's latency overlaps the next one's bytes); direct gather / scatter
    a + (n-1) S/(nB); dissemination barrier ceil(log2 n) a; pairwise send/recv a + S/B. S is the
    whole buffer (all-gather: n x size under the ASTRA-sim convention). ``algorithm`` None takes
    ``TRAFFIC_ALGORITHM``'s.
    """
    name = base_collective(collective)
    if name not in TRAFFIC_ALGORITHM:
        raise CollectiveError(f"unknown collective {collective!r}")
    algo = algorithm_spelling(algorithm) if algorithm else TRAFFIC_ALGORITHM[name]
    if algo is None:
        raise CollectiveError(f"unknown algorithm {algorithm!r}")
    a, b = latency, bandwidth
    s = float(size * n if name == "all_gather" and size_convention != "nccl" else size)
    if n < 2:
        return 0.0
    lg = math.log2(n)
    key = (name, algo)
    if chunks != 1:
        steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}
        if algo != "ring" or name not in steps or chunks < 1:
            raise CollectiveError(f"no closed form for {name}/{algo} in {chunks} chunks")
        k = steps[name]
        per_link = s / (n * b)  # one step's bytes on a link, unchunked
        return max(k * per_link + a, k * a + (k + chunks - 1) * per_link / chunks)
    if key == ("all_reduce", "ring"):
        return 2 * (n - 1) * (a + s / (n * b))
    if key in (("reduce_scatter", "ring"), ("all_gather", "ring")):
        return (n - 1) * (a + s / (n * b))
    if algo == "halvingDoubling" and name in ("all_reduce", "reduce_scatter", "all_gather"):
        if n & (n - 1):
            raise CollectiveError("closed form for halvingDoubling needs n a power of two")
        one = lg * a + (n - 1) / n * s / b
        return 2 * one if name == "all_reduce" else one
    if key in (("broadcast", "tree"), ("reduce", "tree")):
        return math.ceil(lg) * (a + s / b)
    if key == ("all_reduce", "tree"):
        return 2 * math.ceil(lg) * (a + s / b)
    if key in (("broadcast", "chain"), ("reduce", "chain")):
        return (n - 1) * a + s / b
    if key == ("all_to_all", "direct"):  # a window only limits sends on the wire at once:
        return a + (n - 1) * s / (n * b)  # the next starts as one's bytes are out
    if key in (("gather", "direct"), ("scatter", "direct")):
        return a + (n - 1) * s / (n * b)
    if key == ("barrier", "dissemination"):
        return math.ceil(lg) * a
    if key == ("send_recv", "pairwise"):
        return a + s / b
    raise CollectiveError(f"no closed form for {name}/{algo}")
