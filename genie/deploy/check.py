"""One row of ``genie hosts check``: a check's name, status, value and fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass
class Check:
    """One check on one host."""

    name: str
    status: Status
    value: str
    fix: str = ""
