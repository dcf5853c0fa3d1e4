"""Experiment tracking: the metric points and params a run logs, and reading them back.

``points`` holds the names, rules and wire form; ``reading`` the server's safe reads of a
run's ``metrics.jsonl`` and ``params.json``; ``recorder`` the worker's buffered writes.
"""
