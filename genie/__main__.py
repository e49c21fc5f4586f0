"""Allow ``python -m genie``."""

import sys

from genie.cli import program

sys.exit(program())
