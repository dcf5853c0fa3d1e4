"""The receiver's answer to a sender's candidates: send, skip (the same) or refuse (why).

Rules: a task active here is never overwritten; the same run with the same metadata is
skipped; a different run replaces ours only when it finished later (``finished_at``).

>>> decide(workspace, Candidate("base#demo#a", "r1", "ab…", "2026-…Z"))
Decision(action='send', reason='new')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from runyard.errors import InvalidInput
from runyard.runtime.liveness import settle
from runyard.sync.candidates import Candidate, metadata_sha256
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace

SEND, SKIP, REFUSE = "send", "skip", "refuse"
MAX_CANDIDATES = 2000  # one diff request; a sender asks in chunks


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    code: str = ""


def parse_candidates(data: Any) -> list[Candidate]:
    """Candidates from a JSON body ``{"candidates": [{task_id, run_id, ...}]}``."""
    items = data.get("candidates") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) > MAX_CANDIDATES:
        raise InvalidInput(f"Expected 'candidates': a list of at most {MAX_CANDIDATES} objects")
    out = []
    for item in items:
        fields = ("task_id", "run_id", "metadata_sha256", "finished_at")
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) for f in fields):
            raise InvalidInput(f"Each candidate is an object of strings {', '.join(fields)}")
        parse_task_id(item["task_id"])
        out.append(Candidate(*(item[f] for f in fields)))
    return out


def decide(workspace: Workspace, cand: Candidate) -> Decision:
    """What to do with one candidate, judged against this workspace now."""
    if not os.path.lexists(workspace.task_dir(cand.task_id)):
        return Decision(SEND, "new")
    local = workspace.read_status(cand.task_id)
    same_meta = metadata_sha256(workspace, cand.task_id) == cand.metadata_sha256
    if local is None:  # a metadata-only or broken folder: replaceable, as a rerun would
        return (
            Decision(SKIP, "same")
            if same_meta and cand.metadata_sha256
            else Decision(SEND, "replace")
        )
    local = settle(workspace, local)
    if not local.terminal:
        return Decision(REFUSE, f"active on the receiver ({local.state.value})", "active")
    if local.run_id == cand.run_id:
        return Decision(SKIP, "same") if same_meta else Decision(SEND, "repair")
    if cand.finished_at > (local.finished_at or ""):
        return Decision(SEND, f"replaces older run {local.run_id}")
    return Decision(REFUSE, f"the receiver holds run {local.run_id}, which finished later", "newer")


def diff(workspace: Workspace, candidates: list[Candidate]) -> dict[str, Any]:
    """``{send: [ids], skip: [ids], refuse: {id: reason}}`` for a diff request."""
    answer: dict[str, Any] = {SEND: [], SKIP: [], REFUSE: {}}
    for cand in candidates:
        decision = decide(workspace, cand)
        if decision.action == REFUSE:
            answer[REFUSE][cand.task_id] = decision.reason
        else:
            answer[decision.action].append(cand.task_id)
    return answer
