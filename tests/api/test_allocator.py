"""The server's allocator keeps freed body pieces instead of faulting in fresh pages."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# pieces the size of a request body read, allocated and freed as an upload does
CHURN = """
import resource, sys
from runyard.api.allocator import keep_freed_buffers
tuned = keep_freed_buffers() if sys.argv[1] == "tuned" else None
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(300):
    pieces = [b"x" * 262144 for _ in range(4)]
    del pieces
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def churn_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_freed_body_pieces_are_reused_without_page_faults() -> None:
    tuned, tuned_faults = churn_faults("tuned")
    _, default_faults = churn_faults("default")
    assert tuned == "True"
    # glibc's defaults give the heap top back and fault it in again: about 64 faults per
    # 256 KiB piece; kept, the same memory serves every round
    assert default_faults > 20_000
    assert tuned_faults < default_faults / 20
