"""Where schedules live on disk, in the workspace's state folder::

    <workspace>/.schedules/created/<name>.json   a schedule made over the API
        {"name", "created_at", "settings": {...ScheduleSettings}}
    <workspace>/.schedules/state/<name>.json     every schedule's state, configured ones too
        {"name", "paused", "last_tick", "history": [...TriggerRecord]}

A name is one path component (:func:`check_schedule_name`), so a lookup is computing a
path. Every write is atomic (temp file, fsync, rename, folder synced); a record that does
not read as one (damaged, a link) reads as missing, never as a crash.

>>> store = ScheduleStore(workspace_root)
>>> store.write_state(ScheduleState(name="nightly", last_tick="2026-03-01T16:00:00Z"))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runyard.schedule_settings import ScheduleSettings, check_schedule_name
from runyard.schedules.history import load_history
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic

SCHEDULES_DIR = ".schedules"


@dataclass
class ScheduleState:
    """What a schedule has done: paused or not, the last tick dealt with, its history."""

    name: str
    paused: bool = False
    last_tick: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "paused": self.paused, "last_tick": self.last_tick,
            "history": self.history,
        }  # fmt: skip


@dataclass(frozen=True)
class CreatedSchedule:
    name: str
    created_at: str
    settings: ScheduleSettings


class ScheduleStore:
    """The schedule files of one workspace (folders made 0700 on the first write)."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root / SCHEDULES_DIR

    def _path(self, kind: str, name: str) -> Path:
        return self.root / kind / f"{check_schedule_name(name)}.json"

    def _write(self, kind: str, name: str, record: dict[str, Any]) -> None:
        path = self._path(kind, name)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_json_atomic(path, record, sync_dir=True, mode=0o600)

    def read_state(self, name: str) -> ScheduleState:
        raw = read_json_tolerant(self._path("state", name)) or {}
        last = raw.get("last_tick")
        return ScheduleState(
            name=name,
            paused=raw.get("paused") is True,
            last_tick=last if isinstance(last, str) else None,
            history=load_history(raw.get("history")),
        )

    def write_state(self, state: ScheduleState) -> None:
        self._write("state", state.name, state.to_json())

    def remove_state(self, name: str) -> None:
        self._path("state", name).unlink(missing_ok=True)

    def created(self) -> list[CreatedSchedule]:
        """The schedules made over the API, by name; unreadable records are left out."""
        folder = self.root / "created"
        names = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
        found = (self._read_created(name) for name in names)
        return [item for item in found if item is not None]

    def _read_created(self, name: str) -> CreatedSchedule | None:
        try:
            raw = read_json_tolerant(self._path("created", name))
        except ValueError:  # a file name that is no schedule name
            return None
        if raw is None or raw.get("name") != name:
            return None
        try:
            settings = ScheduleSettings.model_validate(raw.get("settings"))
        except ValidationError:
            return None
        return CreatedSchedule(name, str(raw.get("created_at", "")), settings)

    def write_created(self, item: CreatedSchedule) -> None:
        record = {
            "name": item.name, "created_at": item.created_at,
            "settings": item.settings.model_dump(mode="json"),
        }  # fmt: skip
        self._write("created", item.name, record)

    def remove_created(self, name: str) -> None:
        self._path("created", name).unlink(missing_ok=True)
