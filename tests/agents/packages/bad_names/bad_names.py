"""A test agent that writes files whose names are not UTF-8 (bytes a sandboxed run may
choose on purpose): ``out/bad\\xff.txt``, ``out/d\\xfe/in\\xfd.txt`` and
``state/checkpoints/bad\\xff.bin``, then its answer."""

from __future__ import annotations

import os

WORKSPACE = os.fsencode(os.environ["RUNYARD_WORKSPACE"])


def write(relative: bytes, data: bytes) -> None:
    path = os.path.join(WORKSPACE, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def main() -> None:
    write(b"out/bad\xff.txt", b"not utf-8 name\n")
    write(b"out/d\xfe/in\xfd.txt", b"nested\n")
    write(b"state/checkpoints/bad\xff.bin", b"state\n")
    write(b"out/final-answer.md", b"wrote three files of names that are not UTF-8\n")


if __name__ == "__main__":
    main()
