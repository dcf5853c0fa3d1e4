"""Sync of finished tasks between servers (DESIGN section 10).

A sender offers its terminal tasks as candidates keyed by (task_id, run_id, metadata
sha256); the receiver says which differ (:mod:`runyard.sync.diff`); each of those is
streamed as one tar (:mod:`runyard.sync.tarstream`) and applied whole or not at all
(:mod:`runyard.sync.receiver`). :mod:`runyard.sync.sender` drives a push,
:mod:`runyard.sync.outbox` pushes each task as it finishes. No web imports here.
"""
