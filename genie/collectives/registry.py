"""The catalogue of (collective, algorithm) pairs and ``build_program``, the one way to plan.

Collective names are genie's (all_reduce, reduce_scatter, all_gather, all_to_all, broadcast,
reduce, send_recv; ``genie.vocabulary`` maps Chakra's names and numbers onto them). Algorithm names
follow ASTRA-sim (ring, direct, halvingDoubling, doubleBinaryTree) plus tree (binomial),
pairwise and hierarchical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from genie.collectives import direct, halving_doubling, hierarchical, nccl_wire, ring, trees
from genie.collectives.emit import Emit, gc_paused, merge
from genie.collectives.nccl_wire import NcclStyle
from genie.collectives.program import Program, ProgramSpec, Step
from genie.errors import CollectiveError
from genie.vocabulary import PLANNED as COLLECTIVES
from genie.vocabulary import algorithm_spelling, canonical_collective

ChunkBuilder = Callable[[ProgramSpec, int, Emit], None]

_BUILDERS: dict[tuple[str, str], ChunkBuilder] = {
    ("all_reduce", "ring"): ring.all_reduce,
    ("all_reduce", "direct"): direct.all_reduce,
    ("all_reduce", "halvingDoubling"): halving_doubling.all_reduce,
    ("all_reduce", "doubleBinaryTree"): trees.double_binary_tree,
    ("all_reduce", "tree"): trees.tree_all_reduce,
    ("all_reduce", "hierarchical"): hierarchical.all_reduce,
    ("reduce_scatter", "ring"): ring.reduce_scatter,
    ("reduce_scatter", "direct"): direct.reduce_scatter,
    ("reduce_scatter", "halvingDoubling"): halving_doubling.reduce_scatter,
    ("reduce_scatter", "hierarchical"): hierarchical.reduce_scatter,
    ("all_gather", "ring"): ring.all_gather,
    ("all_gather", "direct"): direct.all_gather,
    ("all_gather", "halvingDoubling"): halving_doubling.all_gather,
    ("all_gather", "hierarchical"): hierarchical.all_gather,
    ("all_to_all", "direct"): direct.all_to_all,
    ("broadcast", "tree"): trees.broadcast,
    ("reduce", "tree"): trees.reduce,
    ("send_recv", "pairwise"): direct.send_recv,
}

ALGORITHMS: dict[str, tuple[str, ...]] = {
    c: tuple(a for (cc, a) in _BUILDERS if cc == c) for c in COLLECTIVES
}

DEFAULT_ALGORITHM = {
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "all_gather": "ring",
    "all_to_all": "direct",
    "broadcast": "tree",
    "reduce": "tree",
    "send_recv": "pairwise",
}

# Programs whose rank r is rank 0 with every peer shifted by r (offsets aside): all ranks time
# alike on a symmetric network, so the cost model may simulate one rank.
ROTATION_SYMMETRIC = frozenset(
    {
        ("all_reduce", "ring"),
        ("reduce_scatter", "ring"),
        ("all_gather", "ring"),
        ("all_reduce", "direct"),
        ("reduce_scatter", "direct"),
        ("all_gather", "direct"),
        ("all_to_all", "direct"),
        ("send_recv", "pairwise"),
    }
)

# Programs whose rank r is rank 0 with every peer p replaced by p XOR r (n a power of two):
# on a switch or fully-connected network every rank times alike, as with rotation.
XOR_SYMMETRIC = frozenset(
    {
        ("all_reduce", "halvingDoubling"),
        ("reduce_scatter", "halvingDoubling"),
        ("all_gather", "halvingDoubling"),
    }
)

SIZE_CONVENTIONS = ("astra-sim", "nccl")


def canonical_algorithm(collective: str, name: str) -> str:
    """Map an algorithm name (any case, with or without underscores) to its ASTRA-sim spelling."""
    algo = algorithm_spelling(name)
    if algo is None or (collective, algo) not in _BUILDERS:
        offered = ", ".join(ALGORITHMS[collective])
        raise CollectiveError(f"no algorithm {name!r} for {collective}; offered: {offered}")
    return algo


def parse_algorithms(text: str | None) -> dict[str, str]:
    """``ring`` (every collective that offers it) or ``all_reduce=ring,all_to_all=direct``."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        if "=" in part:
            coll, algo = (x.strip() for x in part.split("=", 1))
            coll = canonical_collective(coll)
            out[coll] = canonical_algorithm(coll, algo)
        else:
            hits = 0
            for coll in ALGORITHMS:
                try:
                    out[coll] = canonical_algorithm(coll, part)
                    hits += 1
                except CollectiveError:
                    continue
            if not hits:
                raise CollectiveError(f"no collective offers algorithm {part!r}")
    return out


def build_steps(spec: ProgramSpec, rank: int) -> list[Step]:
    """Build the steps of ``rank`` from a spec: every chunk, interleaved."""
    builder = _BUILDERS.get((spec.collective, spec.algorithm))
    if builder is None:
        raise CollectiveError(f"no builder for {spec.collective}/{spec.algorithm}")
    after = nccl_wire.pipeline_after(spec) if nccl_wire.style_of(spec) else None
    with gc_paused():
        emits = []
        for c in range(spec.chunks):
            e = Emit(c)
            builder(spec, rank, e)
            emits.append(e)
        return merge(emits, after)


def max_steps_per_rank(spec: ProgramSpec) -> int:
    """An upper bound on the steps of any rank of ``spec``, known before building them.

    Every algorithm here emits at most 6(n-1) steps per chunk on a rank (ring all-reduce: 2(n-1)
    sends, 2(n-1) recvs, (n-1) reduces, (n-1) copies; the others fewer), so chunks x (6n + 8)
    bounds them all; a test checks it for every algorithm. Agents refuse a program whose bound
    passes their limit before spending time on building it.
    """
    return max(1, spec.chunks) * (6 * max(1, spec.n_ranks) + 8)


def _check_int(name: str, value: object, lo: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise CollectiveError(f"{name} must be an integer >= {lo}: {value!r}")
    return value


def build_program(
    collective: str | int,
    algorithm: str | None,
    n_ranks: int,
    size: int,
    *,
    chunks: int = 1,
    root: int = 0,
    ranks_per_host: int = 1,
    size_convention: str = "astra-sim",
    window: int | None = None,
    ranks: Sequence[int] = (),
    elem: int = 1,
    oneway: bool = False,
    splits: Sequence[int] = (),
    style: NcclStyle | None = None,
) -> Program:
    """Plan one collective on ``n_ranks`` ranks; ``size`` in bytes as ``size_convention`` says.

    ``splits`` (all-to-all only, direct): n x n bytes, row-major, what each rank sends to each
    rank (an uneven all-to-all; ``size`` is then ignored by the layout). ``style``: run a ring
    as NCCL would (channels, chunks of the protocol's size, its framing on the wire;
    ``genie.collectives.nccl_wire``); it sets ``chunks`` itself (pass 1 or that count).
    """
    coll = canonical_collective(collective)
    algo = canonical_algorithm(coll, algorithm or DEFAULT_ALGORITHM[coll])
    _check_int("n_ranks", n_ranks, 1)
    _check_int("size", size, 0)
    _check_int("chunks", chunks, 1)
    _check_int("ranks_per_host", ranks_per_host, 1)
    _check_int("elem", elem, 1)
    if not 0 <= root < n_ranks:
        raise CollectiveError(f"root {root} outside the group 0..{n_ranks - 1}")
    if size % elem:
        raise CollectiveError(f"size {size} is not a multiple of the element size {elem}")
    if size_convention not in SIZE_CONVENTIONS:
        raise CollectiveError(
            f"size convention {size_convention!r}: use one of {', '.join(SIZE_CONVENTIONS)}"
        )
    if ranks and (len(ranks) != n_ranks or len(set(ranks)) != n_ranks):
        raise CollectiveError(f"ranks must list {n_ranks} distinct global ranks, got {ranks!r}")
    if algo == "hierarchical" and n_ranks % ranks_per_host:
        raise CollectiveError(
            f"hierarchical needs the group size ({n_ranks}) to be a multiple of "
            f"ranks_per_host ({ranks_per_host})"
        )
    if coll == "send_recv" and n_ranks < 2 and size:
        raise CollectiveError("send_recv needs at least 2 ranks")
    splits = _check_splits(coll, algo, n_ranks, elem, splits)
    options: dict[str, int] = {}
    if size_convention == "nccl":
        options["nccl"] = 1
    if window is not None:
        _check_int("window", window, 1)
        options["window"] = window
    if elem != 1:
        options["elem"] = elem
    if oneway:
        options["oneway"] = 1
    if style is not None:
        options.update(style.options())
        got = nccl_wire.piece_count(
            ProgramSpec(collective=coll, algorithm=algo, n_ranks=n_ranks, size=size,
                        options=options, ranks_per_host=ranks_per_host)
        )  # fmt: skip
        if chunks not in (1, got):
            raise CollectiveError(
                f"an NCCL-style program chunks itself ({got} pieces here); chunks={chunks}"
            )
        chunks = got
    spec = ProgramSpec(
        collective=coll,
        algorithm=algo,
        n_ranks=n_ranks,
        size=size,
        chunks=chunks,
        root=root,
        options=options,
        ranks=tuple(ranks),
        ranks_per_host=ranks_per_host,
        splits=splits,
    )
    return Program(spec, build_steps)


def _check_splits(
    coll: str, algo: str, n: int, elem: int, splits: Sequence[int]
) -> tuple[int, ...]:
    """The all-to-all-v matrix, checked (empty when none)."""
    if splits is None or len(splits) == 0:
        return ()
    if (coll, algo) != ("all_to_all", "direct"):
        raise CollectiveError(f"per-peer sizes are for all_to_all/direct, not {coll}/{algo}")
    if len(splits) != n * n:
        raise CollectiveError(f"per-peer sizes: {len(splits)} values for {n} ranks (need n x n)")
    out = tuple(
        _check_int("per-peer size", int(v) if not isinstance(v, bool) else v, 0) for v in splits
    )
    if any(v % elem for v in out):
        raise CollectiveError(f"per-peer sizes must be multiples of the element size {elem}")
    return out


def program_from_spec(spec: ProgramSpec) -> Program:
    """A Program for a decoded spec (checked like ``build_program`` checks its arguments)."""
    o = spec.options
    return build_program(
        spec.collective,
        spec.algorithm,
        spec.n_ranks,
        spec.size,
        chunks=spec.chunks,
        root=spec.root,
        ranks_per_host=spec.ranks_per_host,
        size_convention="nccl" if o.get("nccl") else "astra-sim",
        window=o.get("window"),
        ranks=spec.ranks,
        elem=o.get("elem", 1),
        oneway=bool(o.get("oneway")),
        splits=spec.splits,
        style=nccl_wire.style_of(spec),
    )


def program_from_bytes(data: bytes) -> Program:
    """Rebuild a Program from ``Program.to_bytes()``."""
    try:
        spec = msgspec.msgpack.decode(data, type=ProgramSpec)
    except msgspec.DecodeError as exc:
        raise CollectiveError(f"not a serialised program: {exc}") from exc
    return program_from_spec(spec)
