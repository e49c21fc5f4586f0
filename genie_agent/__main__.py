"""``python -m genie_agent``: run an agent without loading the rest of genie's CLI.

Same options as ``genie agent``; lab hosts and local clusters start agents this way so an agent
depends only on ``agents`` and the few genie modules it imports (programs, errors).
"""

from __future__ import annotations

import argparse
import sys

from genie.errors import GenieError


def main(argv: list[str] | None = None) -> int:
    """Parse agent options and run the agent; return its exit code."""
    from genie_agent.cli import add_agent_arguments, run_from_args

    p = argparse.ArgumentParser(prog="python -m genie_agent", description="Run a genie agent.")
    add_agent_arguments(p)
    args = p.parse_args(argv)
    try:
        return run_from_args(args)
    except GenieError as exc:
        print(f"genie-agent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
