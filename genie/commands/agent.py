"""``genie agent``: run the per-host agent daemon (control over ZeroMQ, TCP data plane)."""

from __future__ import annotations

import argparse

from genie_agent.cli import add_agent_arguments, run_from_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``agent`` command."""
    p = sub.add_parser(
        "agent",
        help="run the agent daemon on this host",
        description="Run a genie agent: the controller connects to --listen (ZeroMQ); data "
        "flows over TCP on --data-addr.",
    )
    add_agent_arguments(p)
    p.set_defaults(func=run_from_args)
