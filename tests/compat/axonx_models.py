"""Validate an answer against one of AxonX 0.2.2's own models, in the AxonX venv."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from axonx_support import VENV

SCRIPT = (
    "import importlib, json, sys\nfrom pydantic import TypeAdapter\n"
    "module, _, name = sys.argv[1].rpartition('.')\n"
    "model = getattr(importlib.import_module(module), name)\n"
    "TypeAdapter(list[model] if sys.argv[2] == 'many' else model)"
    ".validate_python(json.load(sys.stdin))\n"
)


def validates(model: str, value: Any, *, many: bool = False) -> None:
    """``value`` validates against AxonX's ``model`` (``module.Name``: a pydantic model or
    a dataclass); ``many``: a list of them."""
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", SCRIPT, model, "many" if many else "one"],
        input=json.dumps(value), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
