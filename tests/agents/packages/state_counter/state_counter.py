"""A test agent that counts the runs of its session in ``state/checkpoints/n.txt``.

Each run reads the count (0 when missing), writes count + 1, and answers a JSON line:
``{"saw": <count read>, "count": <count written>, "turns": [roles...], "forkedFrom": ...}``.
Prompt lines add work before the count is written:

big BYTES              write BYTES zero bytes to state/tool-cache/big.bin
symlink TARGET NAME    plant state/checkpoints/NAME as a symlink to TARGET
"""

from __future__ import annotations

import json
import os
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))
STATE = WORKSPACE / "state"


def big(size: str) -> None:
    with open(STATE / "tool-cache" / "big.bin", "wb") as handle:
        handle.truncate(0)
        remaining = int(size)
        while remaining:
            step = min(remaining, 1 << 20)
            handle.write(b"\0" * step)
            remaining -= step


def symlink(target: str, name: str) -> None:
    (STATE / "checkpoints" / name).symlink_to(target)


def main() -> None:
    for line in CONTEXT["userPrompt"].splitlines():
        verb, _, args = line.strip().partition(" ")
        if verb == "big":
            big(args)
        elif verb == "symlink":
            symlink(*args.split(" ", 1))
    counter = STATE / "checkpoints" / "n.txt"
    saw = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(saw + 1))
    answer = {
        "saw": saw,
        "count": saw + 1,
        "turns": [turn["role"] for turn in CONTEXT["history"]],
        "forkedFrom": CONTEXT.get("forkedFrom"),
    }
    (WORKSPACE / "out" / "final-answer.md").write_text(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
