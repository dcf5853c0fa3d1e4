"""Where an upload is written while it arrives: a temp file in ``uploads/`` that hashes and
counts what it is given and refuses more than the upload limit (:class:`UploadTooLarge`).

The HTTP side (:mod:`runyard.api.uploads`) parses the multipart body and feeds the file part
to an :class:`UploadSink`; the catalog then checks the form (:class:`ReceivedUpload`), moves
the file into place and records it. A sink that is not finished is removed: nothing is left
behind but ``.partial-*`` files of a crash, which the start-up sweep removes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from runyard.agents.errors import UploadTooLarge

PARTIAL_PREFIX = ".partial-"


class UploadSink:
    """A temp file that hashes and counts what is written, refusing more than ``limit``."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.limit = limit
        self.path = folder / f"{PARTIAL_PREFIX}{secrets.token_hex(8)}"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
        self.size = 0
        self.received = 0
        self.pending = bytearray()
        self.digest = hashlib.sha256()

    def add(self, data: bytes | memoryview) -> None:
        if self.received + len(data) > self.limit:
            raise UploadTooLarge(self.limit)
        self.received += len(data)
        self.pending += data

    def take(self) -> bytearray:
        """Detach the buffered bytes (to hand them to :meth:`write_block` elsewhere)."""
        block, self.pending = self.pending, bytearray()
        return block

    def write_block(self, block: bytearray) -> None:
        """Hash and write one block; blocks must arrive in order."""
        view = memoryview(block)
        self.digest.update(view)
        while view:
            view = view[os.write(self.fd, view) :]
        self.size += len(block)

    def flush(self) -> None:
        if self.pending:
            self.write_block(self.take())

    def finish(self) -> None:
        """Write what is left, make it durable and close the file."""
        self.flush()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)

    @property
    def sha256(self) -> str:
        return self.digest.hexdigest()


@dataclass
class ReceivedUpload:
    """What a multipart upload held: its text fields and the file, already on disk."""

    fields: dict[str, str]
    file_name: str
    content_type: str
    sink: UploadSink
