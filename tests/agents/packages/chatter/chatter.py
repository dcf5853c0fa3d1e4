"""A test agent whose log is long and full of multi-byte characters.

Prompt: ``BYTES`` (at least that many bytes of log). Lines of an odd number of ASCII
characters then 'é' (2 bytes), '€' (3) and '😀' (4), so characters straddle every byte
offset; they are written in pieces of 4099 bytes, so writes end inside characters too.
The same text goes to out/chatter.txt for the test to compare with.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))


def text(size: int) -> bytes:
    lines: list[str] = []
    total = 0
    index = 0
    while total < size:
        line = f"{index:05d}" + "x" * (index % 7) + "é€😀" * (1 + index % 5) + "\n"
        lines.append(line)
        total += len(line.encode())
        index += 1
    return "".join(lines).encode()


def main() -> None:
    data = text(int(CONTEXT["userPrompt"].split()[0]))
    (WORKSPACE / "out" / "chatter.txt").write_bytes(data)
    (WORKSPACE / "out" / "final-answer.md").write_text("chattered", encoding="utf-8")
    out = sys.stdout.buffer
    for start in range(0, len(data), 4099):
        out.write(data[start : start + 4099])
        out.flush()


if __name__ == "__main__":
    main()
