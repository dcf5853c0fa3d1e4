"""Retention of finished work: what ``runyard gc`` removes, and the server's periodic run.

    report = collect(GcContext.local(settings), dry_run=True)
    report.to_json()   # {"dry_run", "tasks", "logs", "run_workspaces", "uploads", "bytes", ...}

A dry run lists exactly what the same call without ``dry_run`` removes (given no change in
between); nothing active is ever touched (see :mod:`runyard.retention.collect`).
"""

from runyard.retention.collect import GcContext, GcReport, collect

__all__ = ["GcContext", "GcReport", "collect"]
