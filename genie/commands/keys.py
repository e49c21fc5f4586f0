"""``genie keys init``: make the CURVE key pairs of the control channel (see ``genie.keys``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from genie.errors import UsageError

DEFAULT_DIR = "~/.genie/keys"


def _init(args: argparse.Namespace) -> int:
    from genie.keys import fingerprint, init_keys

    d = Path(args.dir).expanduser()
    agents = _agent_names(args.agents)
    pairs = init_keys(d, agents, overwrite=args.force)
    for name, pair in pairs.items():
        print(
            f"{name}: {d / (name + '.public')} (secret {name}.secret, mode 600) "
            f"key {fingerprint(pair.public)}..."
        )
    print(
        f"agents need {d}/agent.public, agent.secret and controller.public (or trusted/*.public);"
        " start them with GENIE_KEYS=DIR. The controller needs controller.* and agent*.public."
    )
    return 0


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def _agent_names(text: str | None) -> list[str]:
    """The agent names of ``--agents A,B``: each a testbed host name (never a path)."""
    if text is None:
        return []
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise UsageError("--agents names no agent (give A,B or leave it out)")
    for a in names:
        if not _NAME.match(a) or ".." in a:
            raise UsageError(
                f"--agents: {a!r} is not an agent name (1-64 of A-Z a-z 0-9 _ . -, not a path)"
            )
    return names


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``keys`` command."""
    p = sub.add_parser("keys", help="CURVE keys of the control channel")
    ks = p.add_subparsers(dest="keys_command", metavar="SUBCOMMAND", required=True)
    i = ks.add_parser(
        "init",
        help="make the controller and agent key pairs",
        description="Make CURVE key pairs (zmq.curve_keypair): controller.{public,secret}, "
        "agent.{public,secret} and, with --agents, one pair per agent. Secret files are mode "
        "600. Agents started with GENIE_KEYS=DIR accept only controller.public and "
        "trusted/*.public.",
    )
    i.add_argument("--dir", default=DEFAULT_DIR, help=f"key directory (default {DEFAULT_DIR})")
    i.add_argument("--agents", metavar="A,B", help="also make a pair for each of these agents")
    i.add_argument("--force", action="store_true", help="replace existing keys")
    i.set_defaults(func=_init)
