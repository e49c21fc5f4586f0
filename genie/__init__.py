"""genie: a hardware-in-the-loop network emulation testbed for distributed ML."""

__version__ = "0.1.0"
