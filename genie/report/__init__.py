"""Reports people look at: PNG plots, one self-contained report.html, the figures as JSON."""

from genie.report.build import Report, build_report

__all__ = ["Report", "build_report"]
