"""Runs after the netns tests: nothing they built may be left on the machine."""

from __future__ import annotations

import os

import pytest

from genie.testbed import netns

PREFIX = "genie-pt-"


@pytest.mark.skipif(os.geteuid() != 0 or bool(netns.tools_missing()), reason="needs root and ip")
def test_no_genie_test_namespace_or_link_is_left() -> None:
    assert netns.list_namespaces(prefix=PREFIX) == []
    assert netns.list_root_links(prefix=PREFIX) == []
