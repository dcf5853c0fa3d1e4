"""How many bytes removing a file or a folder frees: hard links counted once, and only
when every link of an inode lies inside what is removed (a run's hard-linked input frees
nothing while its upload stays). Symlinks are never followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def freed_bytes(path: Path) -> int:
    """Bytes freed by removing ``path`` (0 when it is gone or holds only shared inodes)."""
    seen: dict[tuple[int, int], list[int]] = {}
    for info in _regular_files(path):
        key = (info.st_dev, info.st_ino)
        entry = seen.setdefault(key, [info.st_size, info.st_nlink, 0])
        entry[2] += 1
    return sum(size for size, links, found in seen.values() if found >= links)


def _regular_files(path: Path) -> list[os.stat_result]:
    try:
        top = os.lstat(path)
    except OSError:
        return []
    if stat.S_ISREG(top.st_mode):
        return [top]
    if not stat.S_ISDIR(top.st_mode):
        return []
    found: list[os.stat_result] = []
    for folder, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(info)
    return found
