"""Rebuild the table of docs/validation.md from the data files in docs/validation/.

Run from the repository root: ``python docs/validation/make_table.py`` (``--check`` only says
whether the document is up to date, exit 1 if not). The pricing is genie's
(``genie.calibration.published``, ``published_systems``, ``published_doc``); this script only
reads the data files and writes the document.
"""

from __future__ import annotations

import sys
from pathlib import Path

from genie.calibration.published import load_all, replace_table
from genie.calibration.published_doc import document_block

HERE = Path(__file__).resolve().parent
DATA = HERE  # published.toml and sources/*.toml
DOC = HERE.parent / "validation.md"


def main(argv: list[str]) -> int:
    """Write (or with --check, compare) the table."""
    doc = DOC.read_text()
    new = replace_table(doc, document_block(load_all(DATA)))
    if "--check" in argv:
        if new != doc:
            print(f"{DOC} is out of date: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        print(f"{DOC} is up to date")
        return 0
    DOC.write_text(new)
    print(f"wrote the table of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
