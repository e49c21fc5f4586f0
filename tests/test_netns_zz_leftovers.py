"""Runs after the netns tests: nothing they built may be left on the machine."""

from __future__ import annotations

import os

import pytest

from genie.testbed import netns, state

PREFIX = "genie-pt-"


@pytest.mark.skipif(os.geteuid() != 0 or bool(netns.tools_missing()), reason="needs root and ip")
def test_no_genie_namespace_or_link_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    assert netns.list_namespaces(prefix=PREFIX) == []
    assert netns.list_root_links(prefix=PREFIX) == []
    # anything else genie-prefixed must belong to a testbed someone brought up on purpose
    monkeypatch.delenv("GENIE_STATE_DIR", raising=False)
    recorded = {n for _, st in state.load_all() if st for n in st.namespaces + st.root_links}
    stray = set(netns.list_namespaces()) | set(netns.list_root_links())
    assert stray <= recorded, f"genie namespaces/links without a testbed record: {stray}"
