"""Serve the Studio's static files (package data) at ``/``."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles


def studio_dir() -> Path:
    return Path(str(files("runyard") / "studio"))


def mount_studio(app: FastAPI) -> None:
    app.mount("/", StaticFiles(directory=studio_dir(), html=True), name="studio")
