"""A test agent that plays tricks on the files the server serves or changes, one command a line.

flip PATH TARGET SECONDS TEXT   for SECONDS, swap PATH (atomically, by rename) between a
                                regular file holding TEXT and a symlink to TARGET
write PATH TEXT                 write TEXT to PATH
hardlink SRC DST                link DST to SRC
symlink TARGET PATH             replace PATH (a folder, file or nothing) by a symlink to TARGET
file PATH TEXT                  replace PATH (a folder, file or nothing) by a file holding TEXT
answer TEXT                     write TEXT to out/final-answer.md

Relative paths are relative to the workspace (/workspace in a sandbox).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = Path(os.environ["RUNYARD_CONTEXT"])


def resolve(path: str) -> Path:
    return Path(path) if path.startswith("/") else WORKSPACE / path


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def flip(path: str, target: str, seconds: str, text: str) -> None:
    name = resolve(path)
    regular, link = name.with_name(".flip-regular"), name.with_name(".flip-link")
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        regular.write_text(text)
        os.replace(regular, name)
        link.symlink_to(target)
        os.replace(link, name)
    regular.write_text(text)
    os.replace(regular, name)


def write(path: str, text: str) -> None:
    resolve(path).write_text(text)


def hardlink(src: str, dst: str) -> None:
    os.link(resolve(src), resolve(dst))


def symlink(target: str, path: str) -> None:
    remove(resolve(path))
    resolve(path).symlink_to(target)


def file(path: str, text: str) -> None:
    remove(resolve(path))
    resolve(path).write_text(text)


def answer(text: str) -> None:
    write("out/final-answer.md", text)


COMMANDS = {
    "flip": lambda args: flip(*args.split(" ", 3)),
    "write": lambda args: write(*args.split(" ", 1)),
    "hardlink": lambda args: hardlink(*args.split(" ", 1)),
    "symlink": lambda args: symlink(*args.split(" ", 1)),
    "file": lambda args: file(*args.split(" ", 1)),
    "answer": answer,
}


def main() -> None:
    prompt = json.loads(CONTEXT.read_text(encoding="utf-8"))["userPrompt"]
    for line in prompt.splitlines():
        verb, _, args = line.strip().partition(" ")
        if verb:
            print(f"flip_probe: {verb}", flush=True)
            COMMANDS[verb](args)
    print("flip_probe done", flush=True)


if __name__ == "__main__":
    main()
