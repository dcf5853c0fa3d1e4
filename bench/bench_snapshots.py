"""State snapshot figures: the time and the extra disk one checkpoint of a 1 GiB state folder
costs, copied, and cloned (reflink) where the filesystem can.

Prints figures; asserts nothing. Usage::

    python bench/bench_snapshots.py [--mib 1024] [--files 16] [--dir /tmp]
        [--reflink-dir /mnt/xfs] [--no-loop]

The copy figure is taken under ``--dir`` (ext4 here: no reflink). The reflink figure is
taken under ``--reflink-dir`` when given, else — when running as root with ``mkfs.xfs`` or
``mkfs.btrfs`` — on a loop-mounted XFS (``reflink=1``) or btrfs image made for the run and
removed afterwards. Extra disk is the filesystem's free space before minus after the
snapshot (``statvfs``), so shared extents count as nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from runyard.agents.snapshots import Snapshots  # noqa: E402

MIB = 1 << 20


def fill_state(state: Path, mib: int, files: int) -> None:
    """``mib`` MiB of incompressible data over ``files`` files under checkpoints/."""
    folder = state / "checkpoints"
    folder.mkdir(parents=True)
    block = os.urandom(MIB)
    per_file = mib // files
    for index in range(files):
        with open(folder / f"part-{index:03d}.bin", "wb") as handle:
            for step in range(per_file):
                handle.write(block[step % 7 :] + block[: step % 7])
            handle.flush()
            os.fsync(handle.fileno())


def free_bytes(path: Path) -> int:
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def measure(base: Path, mib: int, files: int, label: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-snap-", dir=base))
    try:
        state = work / "state"
        fill_state(state, mib, files)
        os.sync()
        snapshots = Snapshots(work / "snapshots", max_bytes=(mib + 64) * MIB, keep_last=20)
        before = free_bytes(work)
        started = time.perf_counter()
        record = snapshots.take(state, "ses-bench", "run-bench")
        elapsed = time.perf_counter() - started
        os.sync()
        extra = before - free_bytes(work)
        print(
            f"{label:28} {record.get('method', record.get('reason')):8} "
            f"{mib} MiB in {files} files: {elapsed:6.2f} s, "
            f"extra disk {extra / MIB:8.1f} MiB ({record.get('files')} files)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def loop_mount(mib: int) -> Iterator[tuple[Path, str] | None]:
    """A reflink-capable filesystem on a loop device (root only), or None."""
    maker = next(
        (
            (tool, args, name)
            for tool, args, name in (
                ("mkfs.xfs", ["-q", "-m", "reflink=1"], "xfs"),
                ("mkfs.btrfs", ["-q"], "btrfs"),
            )
            if shutil.which(tool)
        ),
        None,
    )
    if maker is None or os.geteuid() != 0:
        yield None
        return
    tool, args, name = maker
    holder = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    image, mount = holder / "fs.img", holder / "mnt"
    mount.mkdir()
    with open(image, "wb") as handle:
        handle.truncate((mib * 3 + 512) * MIB)
    subprocess.run([tool, *args, str(image)], check=True)
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=False)
    try:
        yield (mount, name) if mounted.returncode == 0 else None
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", str(mount)], check=False)
        shutil.rmtree(holder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--reflink-dir", type=Path, default=None)
    parser.add_argument("--no-loop", action="store_true")
    options = parser.parse_args()
    measure(options.dir, options.mib, options.files, f"copy ({options.dir})")
    if options.reflink_dir is not None:
        measure(options.reflink_dir, options.mib, options.files, f"reflink ({options.reflink_dir})")
        return
    if options.no_loop:
        return
    with loop_mount(options.mib) as found:
        if found is None:
            print("reflink: no reflink filesystem (needs root and mkfs.xfs or mkfs.btrfs)")
            return
        mount, name = found
        measure(mount, options.mib, options.files, f"reflink ({name} loop mount)")


if __name__ == "__main__":
    main()
