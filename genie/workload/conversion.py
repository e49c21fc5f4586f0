"""Lossless conversion between a workload's forms: Chakra ET files, genie's readable JSON, and
Chakra's JSON rank files (``chakra_jsonizer``): ``convert(src, dst)`` says what it wrote."""

from __future__ import annotations

from pathlib import Path

from genie.errors import UsageError


def _is_et_file(p: Path) -> bool:
    return p.name.endswith(".et") or p.name.endswith(".et.gz")


def _is_genie_json(p: Path) -> bool:
    """Whether a .json file is genie's own JSON form (else: Chakra's jsonizer output)."""
    from genie.workload.json_form import FORMAT

    try:
        with p.open("rb") as f:
            return FORMAT.encode() in f.read(200)
    except OSError:
        return False


def convert(source: str | Path, target: str | Path) -> tuple[list[str], list[str]]:
    """Convert .et -> JSON or JSON -> .et, losslessly (Chakra JSON rank files -> .et too).

    Returns (what was written, notes on the input), each a list of lines.
    """
    from genie.workload.et_codec import read_trace, write_trace
    from genie.workload.json_form import read_json, write_json
    from genie.workload.loader import _RANK_RE, load_workload, save_workload
    from genie.workload.model import RankGraph, Workload

    src, dst = Path(source), Path(target)
    m = _RANK_RE.match(src.name)
    chakra_json = m is not None and m.group("ext") == "json" and not _is_genie_json(src)
    if chakra_json and not dst.name.endswith(".json"):
        wl = load_workload(src, validate=False)  # <prefix>.<rank>.json from chakra_jsonizer
        files = save_workload(wl, dst)
        return [f"wrote {len(files)} files: {files[0]} ..."], []
    if src.name.endswith(".json") and not chakra_json:
        wl = read_json(src)
        if _is_et_file(dst):
            if len(wl.ranks) != 1:
                raise UsageError(
                    f"{src} holds {len(wl.ranks)} ranks; give an output prefix, not one .et file"
                )
            dst.parent.mkdir(parents=True, exist_ok=True)
            write_trace(dst, wl.ranks[0].metadata, wl.ranks[0].nodes)
            return [f"wrote {dst}"], []
        files = save_workload(wl, dst)
        return [f"wrote {len(files)} files: {files[0]} ..."], []
    if not dst.name.endswith(".json"):
        raise UsageError(f"output {dst} must end in .json when the input is Chakra ET")
    if src.is_file() and _is_et_file(src):
        meta, nodes, problems = read_trace(src)
        m = _RANK_RE.match(src.name)
        rank = int(m.group("rank")) if m else 0
        wl = Workload(ranks=[], problems=problems, name=m.group("stem") if m else src.stem)
        wl.ranks.append(RankGraph(rank=rank, nodes=nodes, metadata=meta, source=str(src)))
        wl.groups = {}
    else:
        wl = load_workload(src, validate=False)
    write_json(wl, dst)
    return [f"wrote {dst} ({wl.node_count()} nodes, {len(wl.ranks)} ranks)"], list(wl.problems)
