"""A test agent that writes past its disk quota. The prompt is ``<folder> <MiB> <seconds>``:
it writes that many MiB into ``<folder>/fill.bin`` (``out``, ``tmp`` or ``state``), one MiB
every 20 ms, then waits that many seconds and ends with ``out/final-answer.md`` saying how
much it wrote (a run stopped for its quota never gets there)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))


def main() -> None:
    folder, mib, seconds = CONTEXT["userPrompt"].split()
    chunk = b"x" * (1 << 20)
    with open(WORKSPACE / folder / "fill.bin", "wb") as sink:
        for _ in range(int(mib)):
            sink.write(chunk)
            sink.flush()
            os.fsync(sink.fileno())
            time.sleep(0.02)
    time.sleep(float(seconds))
    (WORKSPACE / "out" / "final-answer.md").write_text(f"wrote {mib} MiB", encoding="utf-8")


main()
