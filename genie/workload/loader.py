"""Load and save whole workloads: ``<prefix>.<rank>.et`` files plus process-group membership.

File set: ranks 0..N-1 as ``<prefix>.<rank>.et`` or Chakra's JSON form ``<prefix>.<rank>.json``
(``genie.workload.chakra_json``), either one gzip-compressed (``.gz``); a gap is an error naming
the missing ranks. Loading is two-pass per rank (decode every node, then resolve deps by id),
then validated (``genie.workload.validate``).

Process groups (Chakra nodes carry only ``pg_name``), in order of precedence:
1. a comm-group file given to ``load_workload(comm_groups=...)``, else
   ``<prefix>.comm_group.json``: ASTRA-sim's format, ``{"<pg_name>": [global ranks]}``.
2. PyTorch's process_group:init METADATA nodes (``genie.workload.process_groups``).
3. GlobalMetadata attrs ``pg_ranks:<pg_name>`` (int64_list of global ranks), which genie's
   generators write into each rank's file for the groups that rank belongs to, so a set of
   ``.et`` files is self-contained (their union is every group) and grows linearly in ranks.
Readable names of numbered groups come from ``pg_desc:<pg_name>`` GlobalMetadata attrs (string)
and PyTorch's ``pg_desc`` (``Workload.group_desc``).
The empty name ``""`` (a node without ``pg_name``) is the default group of all ranks, and so is
``"0"`` when no source defines it (PyTorch's default group; ASTRA-sim reads it the same way).
``save_workload`` writes the rank files and, when there are named groups, the JSON side file.
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from genie import progress
from genie.errors import ValidationError, WorkloadError
from genie.workload.chakra_json import decode_chakra_json
from genie.workload.et_codec import (
    AttrMemo,
    gc_paused,
    node_memo,
    open_bytes,
    read_trace,
    read_trace_columns,
    write_trace,
)
from genie.workload.model import DEFAULT_GROUP, Attr, Metadata, Node, RankGraph, Workload
from genie.workload.process_groups import (
    WORLD_PG_NAME,
    groups_from_pg_nodes,
    read_comm_group_file,
)
from genie.workload.validate import RankOutcome, validate_workload

if TYPE_CHECKING:
    from genie.workload.et_columns import NodeColumns

GROUP_ATTR_PREFIX = "pg_ranks:"
DESC_ATTR_PREFIX = "pg_desc:"
GROUP_FILE_SUFFIX = ".comm_group.json"
_DERIVED = operator.attrgetter("_d")  # a node's derived tuple; slot 2: its pg_name
_PG = operator.itemgetter(2)
_RANK_RE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.(?P<ext>et|json)(?P<gz>\.gz)?$")


def read_rank_file(
    path: str | Path, memo: dict | None = None
) -> tuple[Metadata, list[Node], list[str]]:
    """Read one rank file, ``.et`` or Chakra JSON (``.json``), either gzip-compressed.

    ``memo`` is shared by the reads of one workload (metadata frames repeat across ranks).
    """
    p = Path(path)
    if p.name.endswith((".json", ".json.gz")):
        data, _note = open_bytes(p)
        with gc_paused():
            return decode_chakra_json(data, str(p))
    return read_trace(p, memo)


def _read_rank_columns(
    path: Path, memo: dict
) -> tuple[Metadata, list[Node], list[str], NodeColumns | None]:
    """``read_rank_file``, plus the columns an ``.et`` file's nodes were made from (or None)."""
    if path.name.endswith((".json", ".json.gz")):
        return (*read_rank_file(path, memo), None)
    return read_trace_columns(path, memo)


def group_attrs(groups: dict[str, tuple[int, ...]]) -> list[Attr]:
    """GlobalMetadata attrs recording the named process groups (see the module docstring)."""
    return [
        Attr(GROUP_ATTR_PREFIX + name, "int64_list", list(ranks))
        for name, ranks in groups.items()
        if name != DEFAULT_GROUP
    ]


def member_group_attrs(
    groups: dict[str, tuple[int, ...]],
    n_ranks: int,
    extra: Callable[[str], list[Attr]] | None = None,
) -> list[list[Attr]]:
    """Per rank, the ``group_attrs`` of the named groups it belongs to (plus ``extra(name)``).

    What a rank's file needs: its own groups, so the attrs grow with the ranks' memberships,
    not ranks x groups (the loader unites the ranks' groups; the comm-group side file holds
    them all). Each group's attrs are made once and shared; an empty member tuple is every rank.
    """
    out: list[list[Attr]] = [[] for _ in range(n_ranks)]
    for name, ranks in groups.items():
        if name == DEFAULT_GROUP:
            continue
        attrs = [Attr(GROUP_ATTR_PREFIX + name, "int64_list", list(ranks))]
        if extra is not None:
            attrs += extra(name)
        for r in ranks or range(n_ranks):
            if 0 <= r < n_ranks:
                out[r] += attrs
    return out


def find_rank_files(path: str | Path) -> tuple[Path, dict[int, Path]]:
    """Resolve a prefix, a directory holding one workload, or one rank file to its rank files."""
    p = Path(path)
    if p.is_dir():
        stems = {m.group("stem") for name in os.listdir(p) if (m := _RANK_RE.match(name))}
        if not stems:
            raise WorkloadError(f"{p}: no <name>.<rank>.et (or .json) files in this directory")
        if len(stems) > 1:
            raise WorkloadError(
                f"{p}: holds several workloads ({', '.join(sorted(stems))}); give the prefix"
            )
        p = p / stems.pop()
    elif p.is_file() and (m := _RANK_RE.match(p.name)):
        p = p.with_name(m.group("stem"))
    found: dict[int, Path] = {}
    parent = p.parent if str(p.parent) else Path(".")
    if parent.is_dir():
        stem = p.name
        match = _RANK_RE.match
        # names, not Paths: the directory may hold other workloads' thousands of files
        for name in os.listdir(parent):  # the order of Path.iterdir
            if not name.startswith(stem):
                continue
            m = match(name)
            if m and m.group("stem") == stem:
                r = int(m.group("rank"))
                if r in found:
                    raise WorkloadError(f"{p}: rank {r} exists as both {found[r].name} and {name}")
                found[r] = parent / name
    if not found:
        raise WorkloadError(f"no rank files {p}.<rank>.et (or .et.gz, .json, .json.gz) found")
    return p, found


def _missing(ranks: set[int], n: int) -> list[int]:
    return [r for r in range(n) if r not in ranks]


def all_rank_files(path: str | Path) -> tuple[Path, dict[int, Path], int]:
    """``find_rank_files`` and the rank count, refusing a workload with a rank file missing."""
    prefix, found = find_rank_files(path)
    n = max(found) + 1
    missing = _missing(set(found), n)
    if missing:
        raise WorkloadError(
            f"{prefix}: rank files missing for ranks {missing} "
            f"(found {len(found)} of {prefix.name}.0.et .. {prefix.name}.{n - 1}.et)"
        )
    return prefix, found, n


def _read_group_file(prefix: Path) -> dict[str, tuple[int, ...]] | None:
    f = prefix.with_name(prefix.name + GROUP_FILE_SUFFIX)
    return read_comm_group_file(f) if f.is_file() else None


def _distinct_metadata(ranks: list[RankGraph]) -> list[RankGraph]:
    """The ranks whose metadata attrs are not the very same Attr objects as an earlier rank's
    (ranks read with one memo share them, and their template, when their metadata bytes are
    equal: then telling them apart costs nothing per attr)."""
    seen: set = set()
    out = []
    for rg in ranks:
        meta = rg.metadata
        template = meta.template  # set by the reader's memo
        if template is not None and len(template) == len(meta.attrs):
            key: tuple = ("template", id(template))
        else:
            key = tuple(map(id, meta.attrs))
        if key not in seen:
            seen.add(key)
            out.append(rg)
    return out


def _groups_from_metadata(ranks: list[RankGraph]) -> dict[str, tuple[int, ...]]:
    groups: dict[str, tuple[int, ...]] = {}
    done: set[int] = set()  # ids of member lists already taken (ranks can share one list)
    for rg in _distinct_metadata(ranks):
        for a in rg.metadata.attrs:
            v = a.value
            if a.name.startswith(GROUP_ATTR_PREFIX) and isinstance(v, list) and id(v) not in done:
                done.add(id(v))
                name = a.name[len(GROUP_ATTR_PREFIX) :]
                # a group's members repeat in each member's file: compared as they are
                # (C speed), converted one by one only where they differ or are first seen
                members = groups.get(name)
                if members is None or tuple(v) != members:
                    members = tuple(int(x) for x in v)
                if name in groups and groups[name] != members:
                    raise WorkloadError(
                        f"{rg.source}: process group {name!r} is {list(members)} here but "
                        f"{list(groups[name])} in another rank's metadata"
                    )
                groups[name] = members
    return groups


def _desc_from_metadata(ranks: list[RankGraph]) -> dict[str, str]:
    """Readable group names from ``pg_desc:<pg_name>`` GlobalMetadata attrs."""
    out: dict[str, str] = {}
    for rg in _distinct_metadata(ranks):
        for a in rg.metadata.attrs:
            if a.name.startswith(DESC_ATTR_PREFIX) and isinstance(a.value, str):
                out[a.name[len(DESC_ATTR_PREFIX) :]] = a.value[:200]
    return out


def load_rank(
    path: str | Path, rank: int | None = None
) -> tuple[RankGraph, dict[str, tuple[int, ...]]]:
    """One rank's graph and the process groups its files describe (not validated).

    ``path`` is a prefix, a directory or one rank file (then that rank, unless ``rank`` says
    otherwise); without ``rank`` the lowest rank found is read. In the groups, an empty member
    tuple means every rank of the source job (PyTorch's ``ranks: []``).
    """
    prefix, found = find_rank_files(path)
    p = Path(path)
    if rank is None:
        m = _RANK_RE.match(p.name) if p.is_file() else None
        rank = int(m.group("rank")) if m else min(found)
    if rank not in found:
        raise WorkloadError(f"{prefix}: no file for rank {rank} (found ranks {sorted(found)})")
    meta, nodes, _notes = read_rank_file(found[rank])
    rg = RankGraph(rank=rank, nodes=nodes, metadata=meta, source=str(found[rank]))
    groups = _groups_from_metadata([rg])
    groups.update(groups_from_pg_nodes([rg], n_ranks=0))
    side = _read_group_file(prefix)
    if side is not None:
        groups.update(side)
    return rg, groups


def resolve_groups(
    prefix: Path,
    n: int,
    heads: list[RankGraph],
    pg_ranks: list[RankGraph],
    comm_groups: str | Path | None,
    uses_world: Callable[[], bool],
) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """A workload's process groups and their readable names, from every source in order of
    precedence (see the module docstring): the ranks' metadata (``heads``), their
    process-group nodes (``pg_ranks``: those of the ``n`` ranks that may have some), then the
    comm-group file (``comm_groups`` or the prefix's side file); the world group where a node
    names it (``uses_world``) and no source does. Groups naming ranks beyond ``n`` are an
    error."""
    groups = _groups_from_metadata(heads)
    desc = _desc_from_metadata(heads)
    groups.update(groups_from_pg_nodes(pg_ranks, n_ranks=n, desc=desc))
    side = read_comm_group_file(comm_groups) if comm_groups else _read_group_file(prefix)
    if side is not None:
        groups.update(side)
    if WORLD_PG_NAME not in groups and uses_world():
        groups[WORLD_PG_NAME] = tuple(range(n))
    beyond = sorted({r for g in groups.values() for r in g if r >= n})
    if beyond:
        raise WorkloadError(
            f"{prefix}: process groups name ranks {beyond} but rank files exist only for "
            f"0..{n - 1}; rank files missing for ranks {beyond}"
        )
    return groups, desc


#: a workload's rank files as ``all_rank_files`` finds them: (prefix, rank -> path, rank count)
RankFiles = tuple[Path, dict[int, Path], int]


def load_workload(
    path_prefix_or_dir: str | Path,
    *,
    validate: bool = True,
    comm_groups: str | Path | None = None,
    files: RankFiles | None = None,
) -> Workload:
    """Load and validate rank files (a prefix, a directory or one rank file).

    ``comm_groups`` names an ASTRA-sim comm-group JSON file that overrides every other source
    of process-group membership (see the module docstring). ``files``: what
    ``all_rank_files(path_prefix_or_dir)`` gave a caller that looked already (the directory is
    not listed again).
    """
    # the cyclic collector would walk every node of every rank read so far, once per rank
    # (nodes make no cycles): pause it for the whole load
    if files is not None:
        _check_files(Path(path_prefix_or_dir), files)
    with gc_paused():
        return _load_workload(files or all_rank_files(path_prefix_or_dir), validate, comm_groups)


def _check_files(path: Path, files: RankFiles) -> None:
    """Refuse ``files`` that are not ``all_rank_files(path)``'s shape: ranks 0..n-1, each file
    named ``<prefix>.<rank>...`` beside the prefix, the prefix ``path``'s (a caller's list is
    not trusted to name another workload, or to miss a rank)."""
    prefix, found, n = files
    if sorted(found) != list(range(n)):
        raise WorkloadError(f"{prefix}: the rank files given are not ranks 0..{n - 1}")
    for r, f in found.items():
        m = _RANK_RE.match(f.name)
        if (
            f.parent != prefix.parent
            or not m
            or m.group("stem") != prefix.name
            or int(m.group("rank")) != r
        ):
            raise WorkloadError(f"{prefix}: {f} is not its rank {r} file")
    if (
        prefix != path
        and prefix.parent != path
        and not ((m := _RANK_RE.match(path.name)) and path.with_name(m.group("stem")) == prefix)
    ):
        raise WorkloadError(f"{path}: the rank files given are {prefix}'s")


def _load_workload(files: RankFiles, validate: bool, comm_groups: str | Path | None) -> Workload:
    prefix, found, n = files
    ranks: list[RankGraph] = []
    problems: list[str] = []
    memo: dict = {}
    checked: dict[int, RankOutcome] = {}  # ranks validated from their columns while read
    failed = False
    # ranks whose nodes the node decoder's memo saw (it noted their groups, counted their
    # METADATA nodes), and the others: their nodes are looked at one by one
    unseen: list[RankGraph] = []
    with_meta: list[RankGraph] = []  # ranks that may hold process-group nodes
    with progress.bar(f"reading {prefix.name}", n, "rank files") as bar:
        for r in range(n):
            dm = node_memo(memo)
            before = (dm.nodes, dm.meta_nodes) if dm is not None else (0, 0)
            meta, nodes, notes, cols = _read_rank_columns(found[r], memo)
            rg = RankGraph(rank=r, nodes=nodes, metadata=meta, source=str(found[r]))
            ranks.append(rg)
            dm = node_memo(memo)
            if cols is None and dm is not None and dm.nodes - before[0] == len(nodes):
                if dm.meta_nodes != before[1]:  # (this read decoded them all with the memo)
                    with_meta.append(rg)
            elif nodes:
                unseen.append(rg)
                with_meta.append(rg)
            problems += notes
            if validate and cols is not None and not failed:
                # per-rank checks need only the rank count: done now, while the columns
                # exist; an error waits for the rest to be read (a corrupt file reports first)
                from genie.workload.column_checks import validate_rank_columns

                counts: Counter[str] = Counter()
                try:
                    checked[r] = (validate_rank_columns(rg, cols, n, counts), counts)
                except ValidationError as exc:
                    checked[r] = exc
                    failed = True
            del cols
            bar.advance()
    dm = node_memo(memo)
    groups, desc = resolve_groups(
        prefix,
        n,
        ranks,
        with_meta,
        comm_groups,
        lambda: (
            (dm is not None and WORLD_PG_NAME in dm.pg_names)
            or any(WORLD_PG_NAME in map(_PG, map(_DERIVED, rg.nodes)) for rg in unseen)
        ),
    )
    wl = Workload(ranks=ranks, groups=groups, problems=problems, name=prefix.name)
    wl.group_desc = {k: v for k, v in desc.items() if k in groups}
    if validate:
        with progress.stage(f"validating {prefix.name}"):
            validate_workload(wl, checked=checked)
    return wl


def save_workload(wl: Workload, prefix: str | Path, *, compress: bool = False) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` (``.et.gz`` if ``compress``) and the comm-group side file.

    Parent directories are created. Stale rank files of the same prefix with a rank number
    beyond this workload's are removed, so the set on disk is exactly this workload.
    """
    p = Path(prefix)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkloadError(f"{p.parent}: cannot create directory: {exc.strerror}") from None
    ext = ".et.gz" if compress else ".et"
    written = []
    memo: AttrMemo = {}  # a group's member list, shared by its ranks' metadata, encoded once
    with progress.bar(f"writing {p.name}", len(wl.ranks), "rank files") as bar:
        for rg in wl.ranks:
            f = p.with_name(f"{p.name}.{rg.rank}{ext}")
            write_trace(f, rg.metadata, rg.nodes, memo)
            written.append(f)
            bar.advance()
    kept = {f.name for f in written}  # a set: a list made this ranks x files
    for f in p.parent.iterdir():
        m = _RANK_RE.match(f.name)
        if m and m.group("stem") == p.name and f.name not in kept:
            f.unlink()
    side = p.with_name(p.name + GROUP_FILE_SUFFIX)
    named = {k: list(v) for k, v in wl.groups.items() if k != DEFAULT_GROUP}
    if named:
        side.write_text(json.dumps(named, indent=1) + "\n")
        written.append(side)
    elif side.exists():
        side.unlink()
    return written
