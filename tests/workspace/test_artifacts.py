"""Artifact records {path, size, sha256}: relative to the task folder, never escaping it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from runyard.errors import InvalidInput, UnsafePath
from runyard.workspace.artifacts import (
    CHUNK,
    artifact_record,
    check_relative_path,
    resolve_inside,
    verify_artifact,
)


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "ws" / "etl" / "etl#my-etl#dataset-01"
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_size_and_sha256_equal_hashlib(task_dir: Path, size: int) -> None:
    data = os.urandom(size)
    (task_dir / "data").mkdir()
    (task_dir / "data" / "dataset.parquet").write_bytes(data)
    record = artifact_record(task_dir, "data/dataset.parquet")
    assert record == {
        "path": "data/dataset.parquet",
        "size": size,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_nested_paths_are_accepted_and_normalised(task_dir: Path) -> None:
    nested = task_dir / "a" / "b" / "c"
    nested.mkdir(parents=True)
    (nested / "x.bin").write_bytes(b"x")
    assert artifact_record(task_dir, "a/b/c/x.bin")["path"] == "a/b/c/x.bin"
    assert artifact_record(task_dir, "./a//b/c/x.bin")["path"] == "a/b/c/x.bin"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "relative to the task folder"),
        ("..", "would leave"),
        ("../secret", "would leave"),
        ("data/../../secret", "would leave"),
        ("data/..", "would leave"),
        ("a\x00b", "NUL"),
        ("a\\..\\b", "backslash"),
        ("", "non-empty string"),
        (".", "names no file"),
        (None, "non-empty string"),
        (7, "non-empty string"),
    ],
)
def test_unsafe_paths_are_refused_with_the_reason(
    task_dir: Path, path: object, reason: str
) -> None:
    with pytest.raises(UnsafePath, match=reason) as caught:
        artifact_record(task_dir, path)  # type: ignore[arg-type]
    assert isinstance(caught.value, InvalidInput)
    with pytest.raises(UnsafePath):
        check_relative_path(path)


def test_a_symlink_that_leaves_the_folder_is_refused(task_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do not hash me")
    os.symlink(secret, task_dir / "link.txt")
    os.symlink(tmp_path, task_dir / "up")
    os.symlink("../../..", task_dir / "relative-up")
    for path in ["link.txt", "up/secret.txt", "relative-up/secret.txt"]:
        with pytest.raises(UnsafePath, match="resolves outside"):
            artifact_record(task_dir, path)


def test_a_symlink_inside_the_folder_is_followed(task_dir: Path) -> None:
    (task_dir / "real.bin").write_bytes(b"payload")
    os.symlink("real.bin", task_dir / "alias.bin")
    record = artifact_record(task_dir, "alias.bin")
    assert record["sha256"] == hashlib.sha256(b"payload").hexdigest()
    assert resolve_inside(task_dir, "alias.bin") == (task_dir / "real.bin").resolve()


def test_folders_and_missing_files_are_not_artifacts(task_dir: Path) -> None:
    (task_dir / "sub").mkdir()
    for path in ["sub", "missing.bin"]:
        with pytest.raises(UnsafePath, match="not a regular file"):
            artifact_record(task_dir, path)


def test_verify_artifact_detects_change(task_dir: Path) -> None:
    target = task_dir / "model.bin"
    target.write_bytes(b"0123456789")
    record = artifact_record(task_dir, "model.bin")
    assert verify_artifact(task_dir, record)
    target.write_bytes(b"0123456780")
    assert not verify_artifact(task_dir, record)
    target.write_bytes(b"0123456789")
    assert verify_artifact(task_dir, record)
    target.write_bytes(b"0123456789+")
    assert not verify_artifact(task_dir, record)
    target.unlink()
    assert not verify_artifact(task_dir, record)
    assert not verify_artifact(task_dir, {"path": "../model.bin", "size": 10, "sha256": "x"})
    assert not verify_artifact(task_dir, {"size": 10})
