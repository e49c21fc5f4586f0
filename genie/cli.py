"""The ``genie`` command line: one argparse tree built from the modules in ``genie.commands``.

Each module in ``genie/commands/`` defines ``register(subparsers)`` that adds its commands and
sets ``func`` on them. A GenieError becomes one line on stderr and its exit code; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from genie import __version__, commands
from genie.errors import GenieError


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser from every command module."""
    parser = argparse.ArgumentParser(
        prog="genie",
        description="Network emulation testbed for distributed ML: workloads, collectives, "
        "agents, simulation.",
    )
    parser.add_argument("--version", action="version", version=f"genie {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"genie.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the genie CLI and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except GenieError as exc:
        print(f"genie: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("genie: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
