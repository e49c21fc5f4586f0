"""The ``genie`` command line: one argparse tree built from the modules in ``genie.commands``.

Each module in ``genie/commands/`` defines ``register(subparsers)`` that adds its commands and
sets ``func`` on them. A GenieError becomes one line on stderr (control characters escaped) and
its exit code; what a user's input makes the standard library raise (a path that cannot be
written, JSON nested too deeply, a number out of range, text that is not UTF-8) one line and
exit 2; Ctrl-C exits 130.
SIGTERM is turned into an interrupt (so a live run is finished ``interrupted``, not left
``running``) and exits 143.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from genie import __version__, commands, progress
from genie.errors import GenieError
from genie.wire.text import clean


class _HelpFormatter(argparse.HelpFormatter):
    """Help that shows every option's default (unless it is None, False or already said)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text.lower()
            or default in (None, False, argparse.SUPPRESS)
            or action.option_strings == []
            or isinstance(action, argparse._HelpAction | argparse._VersionAction)
        ):
            return text
        return f"{text} (default: %(default)s)"


class _RawHelpFormatter(_HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, description kept as written."""


class GenieParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (with where to look) and exit code 2."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        if kwargs["formatter_class"] is argparse.RawDescriptionHelpFormatter:
            kwargs["formatter_class"] = _RawHelpFormatter
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """As argparse's, but an option without help still shows its default in --help."""
        if kwargs.get("help") is None and kwargs.get("default") not in (None, False):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print ``genie: error: MESSAGE (see PROG --help)`` and exit 2, like a GenieError."""
        self.exit(2, f"genie: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser from every command module (or only ``command``'s module).

    With ``command``, only ``genie/commands/<command>.py`` is imported (start-up is part of
    every command's time); ``main`` falls back to the full tree when that does not define it.
    """
    parser = GenieParser(
        prog="genie",
        description="Network emulation testbed for distributed ML: workloads, collectives, "
        "agents, simulation.",
    )
    parser.add_argument("--version", action="version", version=f"genie {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="show diagnostics with timestamps on stderr (-v: info, -vv: debug)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="errors only: no warnings, no progress"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(_commands=sub.choices)
    for name in _command_modules() if command is None else [command]:
        module = importlib.import_module(f"genie.commands.{name}")
        module.register(sub)
    return parser


def _command_modules() -> list[str]:
    """The names of the command modules in ``genie/commands/`` (not the ``_private`` ones)."""
    import pkgutil  # here: one command's start-up needs neither pkgutil nor the package scan

    return sorted(
        m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")
    )


def _command_of(argv: Sequence[str]) -> str | None:
    """The command named by ``argv`` when a module of that name defines it, else None."""
    for tok in argv:
        if tok in ("-h", "--help", "--version"):
            return None
        if tok.startswith("-"):
            continue  # -v, -vv, -q come before the command
        if not tok.isidentifier() or tok.startswith("_"):
            return None
        return tok if importlib.util.find_spec(f"genie.commands.{tok}") is not None else None
    return None


def configure_logging(verbose: int, quiet: bool) -> None:
    """Diagnostics of every genie module on stderr, timestamped; warnings and up by default."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO)[min(verbose, 1)]
    if verbose >= 2:
        level = logging.DEBUG
    root = logging.getLogger("genie")
    for h in list(root.handlers):
        if getattr(h, "_genie_cli", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._genie_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(
        logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    )
    root.addHandler(handler)
    root.setLevel(level)


# numpy's BLAS starts a thread per core when numpy is imported (~0.07 s CPU on 2 cores, a
# quarter of a 64-rank simulate); genie's linear algebra is a few small least-squares fits, so
# the command (not the library) asks for one thread unless the user set a count for any BLAS
# (OpenBLAS reads its own variable first, then GOTO's and OpenMP's; MKL its own, then OpenMP's)
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BLAS_CHOICES = (*BLAS_THREADS, "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread() -> None:
    """Ask numpy's BLAS for one thread where the user set no count (before numpy loads)."""
    if "numpy" not in sys.modules and not any(os.environ.get(v) for v in BLAS_CHOICES):
        for name in BLAS_THREADS:
            os.environ[name] = "1"


def program() -> int:
    """The ``genie`` program (console script, ``python -m genie``): ``main`` on one BLAS thread."""
    one_blas_thread()
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the genie CLI and return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_of(argv)
    parser = build_parser(command)
    if command is not None and command not in parser.get_default("_commands"):
        parser = build_parser()  # the module of that name defines other commands
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad argument (already said, one line)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    configure_logging(args.verbose, args.quiet)
    progress.set_quiet(args.quiet)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = _terminate_as_interrupt()
    try:
        rc = args.func(args)
    except GenieError as exc:
        print(f"genie: error: {clean(str(exc), 100_000, keep=chr(10) + chr(9))}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except INPUT_ERRORS as exc:  # bad input or paths: one line, never a traceback
        print(f"genie: error: {input_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            print("genie: terminated (SIGTERM)", file=sys.stderr)
            return 143
        print("genie: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGTERM, previous)
    return int(rc or 0)


# what a user's input (paths, files, numbers) makes the standard library raise
INPUT_ERRORS = (OSError, RecursionError, MemoryError, OverflowError, UnicodeError)


def input_error(exc: BaseException) -> str:
    """One line for an error a user's input caused (the path or the input it is about)."""
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else ""
        why = exc.strerror or type(exc).__name__
        return f"{where}: {why}" if where != "" else f"{why}: {exc}"
    if isinstance(exc, RecursionError):
        return "input nested too deeply (a JSON file nested thousands of levels?)"
    if isinstance(exc, MemoryError):
        return "out of memory reading the input (a device such as /dev/zero, or a huge file?)"
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OverflowError):
        return f"a number is out of range: {exc}"
    return f"{type(exc).__name__}: {exc}"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so every ``finally`` and context manager runs."""


def _on_sigterm(_sig, _frame) -> None:
    raise Terminated("terminated by SIGTERM")


def _terminate_as_interrupt():
    """Install the SIGTERM handler (main thread only); return the one it replaces."""
    try:
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread
        return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
