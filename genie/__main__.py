"""Allow ``python -m genie``."""

import sys

from genie.cli import main

sys.exit(main())
