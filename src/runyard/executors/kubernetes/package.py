"""The agent package folder as ConfigMap content, within the 1 MiB ConfigMap limit."""

from __future__ import annotations

import base64
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runyard.errors import ExecutorError

OBJECT_LIMIT = 1 << 20  # Kubernetes caps ConfigMap and Secret payloads at 1 MiB
_UNSAFE_KEY = re.compile(r"[^-._a-zA-Z0-9]+")


class PackageTooLarge(ExecutorError):
    def __init__(self, folder: Path, size: int, limit: int = OBJECT_LIMIT) -> None:
        self.folder = folder
        self.size = size
        self.limit = limit
        super().__init__(
            f"Agent package {folder} holds at least {size} bytes; a ConfigMap holds at most "
            f"{limit} bytes (1 MiB). Make the package smaller, or put its large files in the "
            "image or in a mounted folder"
        )


@dataclass
class PackageFiles:
    """ConfigMap ``data``/``binaryData`` plus the volume ``items`` that restore the tree."""

    data: dict[str, str] = field(default_factory=dict)
    binary_data: dict[str, str] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0


def _files(folder: Path) -> list[tuple[str, os.stat_result]]:
    found = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in [*sorted(names), *(d for d in dirs if Path(root, d).is_symlink())]:
            path = Path(root, name)
            info = path.lstat()
            rel = path.relative_to(folder).as_posix()
            if not stat.S_ISREG(info.st_mode):
                raise ExecutorError(
                    f"Agent package file {rel!r} in {folder} is not a regular file (symlinks "
                    "and special files cannot go into a ConfigMap)"
                )
            found.append((rel, info))
    return found


def _key(index: int, rel: str) -> str:
    return f"f{index:04d}-{_UNSAFE_KEY.sub('_', rel.replace('/', '.'))}"[:253]


def read_package(folder: Path, limit: int = OBJECT_LIMIT) -> PackageFiles:
    """Every regular file under ``folder``; executable files keep an executable mode."""
    if not folder.is_dir():
        raise ExecutorError(f"Agent package folder {folder} does not exist")
    package = PackageFiles()
    for index, (rel, info) in enumerate(_files(folder)):
        if package.size + info.st_size > limit:
            raise PackageTooLarge(folder, package.size + info.st_size, limit)
        content = (folder / rel).read_bytes()
        package.size += len(content)
        if package.size > limit:
            raise PackageTooLarge(folder, package.size, limit)
        key = _key(index, rel)
        try:
            package.data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            package.binary_data[key] = base64.b64encode(content).decode("ascii")
        mode = 0o555 if info.st_mode & stat.S_IXUSR else 0o444
        package.items.append({"key": key, "path": rel, "mode": mode})
    return package
