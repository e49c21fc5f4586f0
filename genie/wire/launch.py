"""How an agent process is started: the command lines every launcher uses.

Local clusters, netns testbeds and lab deploys all start agents with ``launch_command(python)``
followed by the agent's options (``genie_agent/cli.py``); local clusters start each agent under
its supervisor (``supervised_command``: ``genie.deploy.supervise``), which says how it ended.
"""

from __future__ import annotations


def launch_command(python: str) -> list[str]:
    """The start of every agent command line: ``python -P -m genie_agent``.

    ``-P`` keeps the working directory off ``sys.path``, so a stray ``genie/`` or ``genie_agent/``
    folder where the agent is started cannot shadow the installed package.
    """
    return [python, "-P", "-m", "genie_agent"]


def is_agent_cmdline(argv: list[str]) -> bool:
    """True if a process command line (``/proc/PID/cmdline`` split) is a genie agent's."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in ("genie_agent", "agents"):  # "agents": before 0.x renames
            return True
        if arg.endswith("genie") and argv[i + 1] == "agent":  # `genie agent`, `-m genie agent`
            return True
    return False


def supervised_command(python: str, root: str, stem: str = "agent") -> list[str]:
    """The command line of a supervisor running the agent of ``ROOT/STEM.json``
    (``genie.deploy.supervise``: it writes ``ROOT/STEM.log``, ``.pid`` and ``.exit.json``)."""
    cmd = [python, "-P", "-m", "genie.deploy.supervise", root]
    return cmd if stem == "agent" else [*cmd, "--name", stem]
