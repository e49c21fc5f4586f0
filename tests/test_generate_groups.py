"""Generated rank files carry only their own process groups, so generation is linear in ranks.

Before, every rank's GlobalMetadata held all groups (``pg_ranks:`` and ``pg_desc:``), so
``genie workload generate llm --ranks 4096`` wrote 513 MB, mostly 4,096 copies of a ~4,100-group
table. Each rank now writes the groups it belongs to; the loader unites them, and the comm-group
side file (what ASTRA-sim reads) still holds every group.
"""

from __future__ import annotations

import json

import pytest

from genie.api.workload import generate
from genie.cli import build_parser
from genie.commands.workload import generate_spec
from genie.errors import WorkloadError
from genie.workload import load_workload, save_workload
from genie.workload.loader import DESC_ATTR_PREFIX, GROUP_ATTR_PREFIX, member_group_attrs
from genie.workload.model import Attr


def generated(ranks: int, *extra: str):
    """``genie workload generate llm --ranks N`` (the ASTRA-sim target, integer groups)."""
    ns = build_parser().parse_args(
        ["workload", "generate", "llm", "--ranks", str(ranks), *extra, "--out", "unused"]
    )
    return generate(generate_spec(ns), ns.target).workload


def own(rg, prefix: str) -> set[str]:
    """Names of the groups a rank's metadata records under ``prefix``."""
    return {a.name[len(prefix) :] for a in rg.metadata.attrs if a.name.startswith(prefix)}


@pytest.mark.parametrize("extra", [(), ("--tp", "4"), ("--for", "genie")])
def test_each_rank_records_exactly_its_groups(extra):
    wl = generated(32, *extra)
    named = {g: m for g, m in wl.groups.items() if g}
    assert len(named) > 2
    for rg in wl.ranks:
        mine = {g for g, m in named.items() if rg.rank in m}
        assert own(rg, GROUP_ATTR_PREFIX) == mine
        if wl.group_desc:
            assert own(rg, DESC_ATTR_PREFIX) == mine
        for a in rg.metadata.attrs:
            if a.name.startswith(GROUP_ATTR_PREFIX):
                assert tuple(a.value) == named[a.name[len(GROUP_ATTR_PREFIX) :]]


def test_files_alone_and_side_file_give_every_group(tmp_path):
    wl = generated(32, "--tp", "4")
    prefix = tmp_path / "w" / "llm"
    written = save_workload(wl, prefix)
    side = prefix.with_name("llm.comm_group.json")
    assert side in written
    assert json.loads(side.read_text()) == {g: list(m) for g, m in wl.groups.items() if g}
    with_side = load_workload(prefix)
    side.unlink()
    alone = load_workload(prefix)  # the union of the ranks' own groups
    assert alone.groups == with_side.groups == wl.groups
    assert alone.group_desc == with_side.group_desc == wl.group_desc


def test_rank_file_size_does_not_grow_with_ranks(tmp_path):
    """Rank 0's file is the same size at 64 and 256 ranks (it grew by the group table before)."""
    sizes = []
    for n in (64, 256):
        prefix = tmp_path / str(n) / "llm"
        save_workload(generated(n), prefix)
        sizes.append(prefix.with_name("llm.0.et").stat().st_size)
    assert sizes[1] <= sizes[0] * 1.02, sizes


def test_member_group_attrs():
    groups = {"": (0, 1, 2), "a": (0, 1), "b": (2,), "all": ()}
    got = member_group_attrs(groups, 3, lambda g: [Attr("x:" + g, "string_val", g)])
    a = [Attr("pg_ranks:a", "int64_list", [0, 1]), Attr("x:a", "string_val", "a")]
    every = [Attr("pg_ranks:all", "int64_list", []), Attr("x:all", "string_val", "all")]
    b = [Attr("pg_ranks:b", "int64_list", [2]), Attr("x:b", "string_val", "b")]
    assert got == [a + every, a + every, b + every]


def test_shared_group_lists_encode_once_to_the_same_bytes(tmp_path, monkeypatch):
    """save_workload encodes a group's member list once for all its ranks, byte for byte what
    each rank's own encoding gives."""
    from genie.workload import et_codec

    wl = generated(32, "--tp", "4")
    prefix = tmp_path / "w" / "llm"
    calls: list[str] = []
    real = et_codec.encode_attr
    monkeypatch.setattr(et_codec, "encode_attr", lambda a: calls.append(a.name) or real(a))
    save_workload(wl, prefix)
    monkeypatch.setattr(et_codec, "encode_attr", real)
    lists = [c for c in calls if c.startswith(GROUP_ATTR_PREFIX)]
    assert sorted(lists) == sorted(GROUP_ATTR_PREFIX + g for g in wl.groups if g)
    for rg in wl.ranks:
        data = prefix.with_name(f"llm.{rg.rank}.et").read_bytes()
        assert data == et_codec.encode_trace(rg.metadata, rg.nodes)


def test_ranks_disagreeing_on_a_groups_members_are_refused(tmp_path):
    """Each rank's file records its groups; one file naming a group's members differently from
    another's is an error naming the group, the side file gone (else it would override)."""
    wl = generated(8)
    name, members = next((g, m) for g, m in wl.groups.items() if g and len(m) > 1)
    other = next(r for r in members if r != members[0])
    attrs = wl.ranks[other].metadata.attrs
    for k, a in enumerate(attrs):
        if a.name == GROUP_ATTR_PREFIX + name:
            attrs[k] = a._replace(value=[*members[:-1], 99])
    prefix = tmp_path / "llm"
    save_workload(wl, prefix)
    prefix.with_name("llm.comm_group.json").unlink()
    with pytest.raises(WorkloadError, match=f"process group '{name}' is"):
        load_workload(prefix)


def test_member_values_equal_to_ints_read_as_ints(tmp_path):
    """Members compared as read (fast path) give the same ints as converting each one."""
    from genie.workload.loader import _groups_from_metadata
    from genie.workload.model import Metadata, RankGraph

    def rank(r: int, value: list) -> RankGraph:
        attrs = [Attr(GROUP_ATTR_PREFIX + "g", "int64_list", value)]
        return RankGraph(rank=r, nodes=[], metadata=Metadata(attrs=attrs))

    got = _groups_from_metadata([rank(0, [0, 1]), rank(1, ["0", "1"]), rank(2, [0.0, 1.0])])
    assert got == {"g": (0, 1)} and all(type(x) is int for x in got["g"])
    with pytest.raises(WorkloadError, match="is \\[0, 2\\] here"):
        _groups_from_metadata([rank(0, [0, 1]), rank(1, ["0", "2"])])
