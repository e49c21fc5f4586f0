"""Rebuild the table of docs/validation.md from docs/validation/published.toml.

Run from the repository root: ``python docs/validation/make_table.py`` (``--check`` only says
whether the document is up to date, exit 1 if not). The pricing is genie's
(``genie.calibration.published``); this script only reads and writes the two files.
"""

from __future__ import annotations

import sys
from pathlib import Path

from genie.calibration.published import document_block, load, replace_table

HERE = Path(__file__).resolve().parent
DATA = HERE / "published.toml"
DOC = HERE.parent / "validation.md"


def main(argv: list[str]) -> int:
    """Write (or with --check, compare) the table."""
    doc = DOC.read_text()
    new = replace_table(doc, document_block(load(DATA)))
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
