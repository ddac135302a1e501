"""Results to see and share: the HTML report, run comparisons and the local web UI."""

from kernelevo.report.html import write_comparison, write_report
from kernelevo.report.server import make_server, serve

__all__ = ["make_server", "serve", "write_comparison", "write_report"]
