"""Optional dependencies: import one, or fail with one line that says exactly how to get it.

Everything a documented command needs is either a dependency of the package or of an extra
(``report``: matplotlib; ``capture``: jax). ``require(module, extra)`` imports the module or raises
``MissingDependency`` naming the command that needs it and the install line for both kinds of
install: from a clone (``pip install '.[report]'``) and into the environment genie is installed
in (``pip install matplotlib``), with this interpreter's pip.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from genie.errors import MissingDependency

#: extra -> (the packages it installs, what needs them)
EXTRAS = {
    "report": ("matplotlib>=3.8", "genie report (plots and the HTML report)"),
    "capture": ("jax[cpu]>=0.7", "genie capture jax (lowering with XLA)"),
    "sweep": ("dask[distributed]>=2024.1", "genie sweep --dask (a Dask distributed cluster)"),
}


def install_hint(extra: str) -> str:
    """How to install an extra, for a clone and for an installed genie."""
    packages, _ = EXTRAS[extra]
    pip = f"{sys.executable} -m pip"
    return (
        f"from a clone of genie: {pip} install '.[{extra}]'; "
        f"into an installed genie: {pip} install '{packages}'"
    )


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise MissingDependency with the install line of ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        _, purpose = EXTRAS[extra]
        raise MissingDependency(
            f"{purpose} needs {module}, which is not installed ({install_hint(extra)})"
        ) from None
