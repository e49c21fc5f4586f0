"""Load and save whole workloads: ``<prefix>.<rank>.et`` files plus process-group membership.

File set: ranks 0..N-1 as ``<prefix>.<rank>.et`` (or ``.et.gz``); a gap is an error naming the
missing ranks. Loading is two-pass per rank (decode every node, then resolve deps by id), then
validated (``genie.workload.validate``).

Process groups (Chakra nodes carry only ``pg_name``), in order of precedence:
1. ``<prefix>.comm_group.json``, ASTRA-sim's comm-group file: ``{"<pg_name>": [global ranks]}``.
2. GlobalMetadata attrs ``pg_ranks:<pg_name>`` (int64_list of global ranks), which genie's
   generators write into every rank's file, so a set of ``.et`` files is self-contained.
The empty name ``""`` (a node without ``pg_name``) is the default group of all ranks.
``save_workload`` writes the rank files and, when there are named groups, the JSON side file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from genie import progress
from genie.errors import WorkloadError
from genie.workload.et_codec import gc_paused, read_trace, write_trace
from genie.workload.model import DEFAULT_GROUP, Attr, RankGraph, Workload
from genie.workload.validate import validate_workload

GROUP_ATTR_PREFIX = "pg_ranks:"
GROUP_FILE_SUFFIX = ".comm_group.json"
_RANK_RE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et(?P<gz>\.gz)?$")


def group_attrs(groups: dict[str, tuple[int, ...]]) -> list[Attr]:
    """GlobalMetadata attrs recording the named process groups (see the module docstring)."""
    return [
        Attr(GROUP_ATTR_PREFIX + name, "int64_list", list(ranks))
        for name, ranks in groups.items()
        if name != DEFAULT_GROUP
    ]


def find_rank_files(path: str | Path) -> tuple[Path, dict[int, Path]]:
    """Resolve a prefix, a directory holding one workload, or one rank file to its rank files."""
    p = Path(path)
    if p.is_dir():
        stems = {m.group("stem") for f in p.iterdir() if (m := _RANK_RE.match(f.name))}
        if not stems:
            raise WorkloadError(f"{p}: no <name>.<rank>.et files in this directory")
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
        for f in parent.iterdir():
            m = _RANK_RE.match(f.name)
            if m and m.group("stem") == p.name:
                r = int(m.group("rank"))
                if r in found:
                    raise WorkloadError(
                        f"{p}: rank {r} exists as both {found[r].name} and {f.name}"
                    )
                found[r] = f
    if not found:
        raise WorkloadError(f"no rank files {p}.<rank>.et (or .et.gz) found")
    return p, found


def _missing(ranks: set[int], n: int) -> list[int]:
    return [r for r in range(n) if r not in ranks]


def _read_group_file(prefix: Path) -> dict[str, tuple[int, ...]] | None:
    f = prefix.with_name(prefix.name + GROUP_FILE_SUFFIX)
    if not f.is_file():
        return None
    try:
        raw = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{f}: not a readable comm-group JSON file: {exc}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(type(x) is int for x in v) for v in raw.values()
    ):
        raise WorkloadError(f'{f}: expected {{"<pg_name>": [ranks...]}}')
    return {str(k): tuple(v) for k, v in raw.items()}


def _groups_from_metadata(ranks: list[RankGraph]) -> dict[str, tuple[int, ...]]:
    groups: dict[str, tuple[int, ...]] = {}
    for rg in ranks:
        for a in rg.metadata.attrs:
            if a.name.startswith(GROUP_ATTR_PREFIX) and isinstance(a.value, list):
                name = a.name[len(GROUP_ATTR_PREFIX) :]
                members = tuple(int(x) for x in a.value)
                if name in groups and groups[name] != members:
                    raise WorkloadError(
                        f"{rg.source}: process group {name!r} is {list(members)} here but "
                        f"{list(groups[name])} in another rank's metadata"
                    )
                groups[name] = members
    return groups


def load_workload(path_prefix_or_dir: str | Path, *, validate: bool = True) -> Workload:
    """Load and validate ``<prefix>.<rank>.et`` files (a prefix, a directory or one rank file)."""
    prefix, found = find_rank_files(path_prefix_or_dir)
    n = max(found) + 1
    missing = _missing(set(found), n)
    if missing:
        raise WorkloadError(
            f"{prefix}: rank files missing for ranks {missing} "
            f"(found {len(found)} of {prefix.name}.0.et .. {prefix.name}.{n - 1}.et)"
        )
    ranks: list[RankGraph] = []
    problems: list[str] = []
    with progress.bar(f"reading {prefix.name}", n, "rank files") as bar:
        for r in range(n):
            meta, nodes, notes = read_trace(found[r])
            ranks.append(RankGraph(rank=r, nodes=nodes, metadata=meta, source=str(found[r])))
            problems += notes
            bar.advance()
    groups = _groups_from_metadata(ranks)
    side = _read_group_file(prefix)
    if side is not None:
        groups.update(side)
    beyond = sorted({r for g in groups.values() for r in g if r >= n})
    if beyond:
        raise WorkloadError(
            f"{prefix}: process groups name ranks {beyond} but rank files exist only for "
            f"0..{n - 1}; rank files missing for ranks {beyond}"
        )
    wl = Workload(ranks=ranks, groups=groups, problems=problems, name=prefix.name)
    if validate:
        with progress.stage(f"validating {prefix.name}"), gc_paused():
            validate_workload(wl)  # walks millions of objects; no cycles are made
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
    with progress.bar(f"writing {p.name}", len(wl.ranks), "rank files") as bar:
        for rg in wl.ranks:
            f = p.with_name(f"{p.name}.{rg.rank}{ext}")
            write_trace(f, rg.metadata, rg.nodes)
            written.append(f)
            bar.advance()
    for f in p.parent.iterdir():
        m = _RANK_RE.match(f.name)
        if m and m.group("stem") == p.name and f not in written:
            f.unlink()
    side = p.with_name(p.name + GROUP_FILE_SUFFIX)
    named = {k: list(v) for k, v in wl.groups.items() if k != DEFAULT_GROUP}
    if named:
        side.write_text(json.dumps(named, indent=1) + "\n")
        written.append(side)
    elif side.exists():
        side.unlink()
    return written
