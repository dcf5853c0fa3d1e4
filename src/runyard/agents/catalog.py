"""Sessions, uploads and mount grants: the records a client creates before it runs anything.

Mount grants are host folders a session may mount, only inside ``allowed_mount_roots``. A
grant's host path is resolved (symlinks followed) when it is created and must then lie
inside a resolved allowed root; it is resolved again at each launch, so a folder swapped for
a symlink afterwards is refused then too.

An upload is written, while it arrives, to a temp file in ``uploads/`` that hashes and
counts what it is given and refuses more than the upload limit (:class:`UploadSink`,
:class:`UploadTooLarge`). The HTTP side (:mod:`runyard.api.uploads`) parses the multipart
body and feeds the file part to the sink; the catalog then checks the form
(:class:`ReceivedUpload`), moves the file into place and records it. A sink that is not
finished is removed: nothing is left behind but ``.partial-*`` files of a crash, which the
start-up sweep removes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from runyard.agents.errors import (
    AgentForbidden,
    AgentInvalid,
    AgentNotFound,
    SessionClosed,
    UploadTooLarge,
)
from runyard.agents.ids import check_agent_id
from runyard.agents.layout import AgentLayout, Ownership
from runyard.agents.models import (
    Access,
    Artifact,
    MountGrant,
    Page,
    RunScope,
    RunSummary,
    Session,
    SessionState,
    SessionStatus,
    check_file_name,
    check_grant_name,
    check_relative_path,
    check_title,
    media_type_for,
    new_id,
    placement_name,
)
from runyard.agents.store import AgentStore
from runyard.config import Settings
from runyard.faults import fault_point
from runyard.workspace.records import utcnow

MAX_PAGE = 1000


def check_limit(limit: int | None, default: int = 100) -> int:
    if limit is None:
        return default
    if not 1 <= limit <= MAX_PAGE:
        raise AgentInvalid(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    return limit


def visible(scope: RunScope | None, session_id: str) -> bool:
    return scope is None or scope.allows_session(session_id)


def check_scope(scope: RunScope | None, session_id: str) -> None:
    """A run token reaches only its own session; others look like they do not exist."""
    if not visible(scope, session_id):
        raise AgentNotFound("session", session_id)


class Catalog:
    def __init__(
        self, settings: Settings, layout: AgentLayout, store: AgentStore, owner: Ownership
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.store = store
        self.owner = owner

    # sessions
    def create_session(self, title: str | None = None, scope: RunScope | None = None) -> Session:
        if scope is not None:
            raise AgentForbidden("A run token may not create sessions")
        now = utcnow()
        session = Session(new_id("ses"), check_title(title), SessionStatus.OPEN, now, now)
        self.store.create_session(session)
        return session

    def session(self, session_id: str, scope: RunScope | None = None) -> Session:
        check_agent_id(session_id, "session")
        check_scope(scope, session_id)
        session = self.store.get_session(session_id)
        if session is None:
            raise AgentNotFound("session", session_id)
        return session

    def session_state(self, session_id: str, scope: RunScope | None = None) -> SessionState:
        """Where the session's ``/workspace/state`` lives; it exists from its first run on."""
        self.session(session_id, scope)
        state = self.store.get_session_state(session_id)
        if state is None:
            raise AgentNotFound("session state (the session has not run yet) for", session_id)
        return state

    def writable_session(self, session_id: str, action: str, scope: RunScope | None) -> Session:
        session = self.session(session_id, scope)
        if not session.writable:
            raise SessionClosed(session_id, action)
        return session

    def list_sessions(
        self, limit: int | None, cursor: str | None, scope: RunScope | None = None
    ) -> Page:
        if scope is not None:
            return Page([self.session(scope.session_id)])
        return self.store.list_sessions(check_limit(limit), cursor)

    def run_summaries(self, session_ids: list[str]) -> dict[str, RunSummary]:
        """Run count and newest run state of sessions already listed (so already allowed)."""
        return self.store.run_summaries(session_ids)

    def set_status(
        self, session_id: str, status: SessionStatus, scope: RunScope | None = None
    ) -> Session:
        self.session(session_id, scope)
        updated = self.store.set_session_status(session_id, status, utcnow())
        assert updated is not None
        return updated

    # uploads
    def open_upload(self, fields: dict[str, str], scope: RunScope | None) -> UploadSink:
        """Called when the file part starts: refuse early what is already known to be wrong."""
        session_id = fields.get("sessionId")
        if session_id is not None:
            self.writable_session(session_id, "upload files", scope)
        if "relativePath" in fields:
            check_relative_path(fields["relativePath"])
        return UploadSink(self.layout.uploads, self.settings.upload_max_bytes)

    def finish_upload(self, received: ReceivedUpload, scope: RunScope | None) -> Artifact:
        """Validate the whole form, then move the file in place and record it."""
        try:
            artifact = self._artifact_for(received, scope)
            final = self.layout.upload_path(artifact.stored_name)
            os.chmod(received.sink.path, 0o640)
            if self.owner.gid is not None:
                os.chown(received.sink.path, -1, self.owner.gid)
            os.rename(received.sink.path, final)
        except BaseException:
            received.sink.discard()
            raise
        try:
            fault_point("upload.finalise")
            self.store.add_artifact(artifact)
        except BaseException:
            final.unlink(missing_ok=True)
            raise
        return artifact

    def _artifact_for(self, received: ReceivedUpload, scope: RunScope | None) -> Artifact:
        session_id = received.fields.get("sessionId", "")
        if not session_id:
            raise AgentInvalid("The upload has no sessionId field")
        self.writable_session(session_id, "upload files", scope)
        file_name = check_file_name(received.file_name)
        relative_path = check_relative_path(received.fields.get("relativePath"))
        artifact_id = new_id("art")
        return Artifact(
            id=artifact_id,
            session_id=session_id,
            file_name=file_name,
            relative_path=relative_path,
            size=received.sink.size,
            sha256=received.sink.sha256,
            media_type=media_type_for(file_name, received.content_type),
            created_at=utcnow(),
            stored_name=placement_name(artifact_id, file_name),
        )

    def artifact(self, artifact_id: str, scope: RunScope | None = None) -> Artifact:
        artifact = self.store.get_artifact(check_agent_id(artifact_id, "artifact"))
        if artifact is None or not visible(scope, artifact.session_id):
            raise AgentNotFound("artifact", artifact_id)
        return artifact

    def artifact_file(self, artifact: Artifact) -> Path:
        return self.layout.upload_path(artifact.stored_name)

    def list_artifacts(
        self, session_id: str, limit: int | None, cursor: str | None, scope: RunScope | None
    ) -> Page:
        self.session(session_id, scope)
        return self.store.list_artifacts(session_id, check_limit(limit), cursor)

    def sweep_uploads(self) -> list[str]:
        """At start, before any upload: remove what a previous server left half-done —
        temp files, and files whose record was never written; their names."""
        recorded = self.store.stored_names()
        removed = []
        for entry in os.scandir(self.layout.uploads):
            if entry.name not in recorded and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed.append(entry.name)
        return sorted(removed)

    # mount grants
    def create_grant(
        self, session_id: str, name: str, host_path: str, access: object, scope: RunScope | None
    ) -> MountGrant:
        self.writable_session(session_id, "add mount grants", scope)
        grant = MountGrant(
            id=new_id("mnt"),
            session_id=session_id,
            name=check_grant_name(name),
            host_path=str(resolve_grant_path(host_path, self.settings.allowed_mount_roots)),
            access=parse_access(access),
            created_at=utcnow(),
        )
        self.store.add_grant(grant)
        return grant

    def grant(self, grant_id: str, scope: RunScope | None = None) -> MountGrant:
        grant = self.store.get_grant(check_agent_id(grant_id, "mount grant"))
        if grant is None or not visible(scope, grant.session_id):
            raise AgentNotFound("mount grant", grant_id)
        return grant

    def list_grants(
        self, session_id: str, limit: int | None, cursor: str | None, scope: RunScope | None
    ) -> Page:
        self.session(session_id, scope)
        return self.store.list_grants(session_id, check_limit(limit), cursor)

    def revoke_grant(self, grant_id: str, scope: RunScope | None = None) -> MountGrant:
        self.grant(grant_id, scope)
        revoked = self.store.revoke_grant(grant_id)
        assert revoked is not None
        return revoked


def resolve_grant_path(host_path: str, allowed_roots: list[Path]) -> Path:
    """The real folder ``host_path`` names; AgentInvalid when it is outside every root."""
    if not isinstance(host_path, str) or not host_path or "\x00" in host_path:
        raise AgentInvalid("hostPath must be a non-empty absolute path")
    if not os.path.isabs(host_path):
        raise AgentInvalid(f"hostPath {host_path!r} must be absolute")
    if not allowed_roots:
        raise AgentInvalid(
            "No mount grants are allowed: the server has no allowed_mount_roots configured"
        )
    real = Path(os.path.realpath(host_path))
    roots = [Path(os.path.realpath(root)) for root in allowed_roots]
    if not any(real == root or root in real.parents for root in roots):
        shown = ", ".join(str(root) for root in roots)
        via = f" (it resolves to {real})" if str(real) != os.path.normpath(host_path) else ""
        raise AgentInvalid(f"hostPath {host_path!r}{via} is outside the allowed roots: {shown}")
    if not real.is_dir():
        raise AgentInvalid(f"hostPath {host_path!r} is not an existing folder")
    return real


def check_still_granted(stored: str, allowed_roots: list[Path]) -> Path:
    """At launch: the grant's folder must still resolve to itself inside an allowed root."""
    real = resolve_grant_path(stored, allowed_roots)
    if str(real) != stored:
        raise AgentInvalid(f"Mount grant folder {stored} now resolves to {real}; grant it again")
    return real


def parse_access(value: object) -> Access:
    try:
        return Access(str(value)) if isinstance(value, str) else Access(repr(value))
    except ValueError as exc:
        raise AgentInvalid(f"access must be 'ro' or 'rw', got {value!r}") from exc


PARTIAL_PREFIX = ".partial-"


class UploadSink:
    """A temp file that hashes and counts what is written, refusing more than ``limit``.

    :meth:`add` keeps views of the received bytes (no copy) until a block is taken; a
    block is then hashed (:meth:`hash_block`) and written (:meth:`write_block`), which may
    run in two threads at once: the write goes to its own offset, and blocks are hashed in
    the order they were taken. A written block is sent to the disk at once instead of
    waiting in the page cache for :meth:`finish`'s fsync, so the disk works while the rest
    arrives and a large upload does not fill the cache with pages nobody reads; every
    :data:`SYNC_BYTES` the file is fdatasynced, so the disk's own cache is flushed as the
    upload goes and :meth:`finish`'s fsync waits for the last few MiB only, not for all of
    them (without it, up to a third of a 1 GiB upload's time here).

        sink = UploadSink(folder, limit)
        sink.add(data)
        sink.finish()  # hashes and writes what is left, fsyncs, closes
    """

    def __init__(self, folder: Path, limit: int) -> None:
        self.limit = limit
        self.path = folder / f"{PARTIAL_PREFIX}{secrets.token_hex(8)}"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
        self.size = 0
        self.received = 0
        self.pending: list[memoryview] = []
        self.pending_bytes = 0
        self.digest = hashlib.sha256()
        # held while the file is written or closed: a write still running when the upload
        # fails must not go to another file that reused the descriptor
        self.fd_lock = threading.Lock()
        self.synced = 0  # the end of what the last fdatasync made durable

    def add(self, data: bytes | memoryview) -> None:
        """Keep ``data`` for the next block; it must not change afterwards (bytes do not)."""
        if self.received + len(data) > self.limit:
            raise UploadTooLarge(self.limit)
        self.received += len(data)
        if data:
            self.pending.append(memoryview(data))
            self.pending_bytes += len(data)

    def take(self) -> UploadBlock:
        """Detach the buffered bytes as the next block, placed after the previous one."""
        block = UploadBlock(self.pending, self.size, self.pending_bytes)
        self.size += self.pending_bytes
        self.pending, self.pending_bytes = [], 0
        return block

    def hash_block(self, block: UploadBlock) -> None:
        for view in block.views:
            self.digest.update(view)

    def write_block(self, block: UploadBlock) -> None:
        with self.fd_lock:
            if self.fd < 0:
                return
            _pwrite_all(self.fd, block.views, block.offset)
            if hasattr(os, "posix_fadvise"):
                # writeback of everything written so far starts now; pages already on
                # disk leave the cache
                os.posix_fadvise(self.fd, 0, block.offset + block.size, os.POSIX_FADV_DONTNEED)
            end = block.offset + block.size
            if end - self.synced >= SYNC_BYTES:
                os.fdatasync(self.fd)
                self.synced = end

    def flush(self) -> None:
        block = self.take()
        self.hash_block(block)
        self.write_block(block)

    def finish(self) -> None:
        """Write what is left, make it durable and close the file."""
        self.flush()
        with self.fd_lock:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1

    def discard(self) -> None:
        with self.fd_lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        self.pending, self.pending_bytes = [], 0
        self.path.unlink(missing_ok=True)

    @property
    def sha256(self) -> str:
        return self.digest.hexdigest()


@dataclass(frozen=True)
class UploadBlock:
    """Received bytes to write at ``offset`` of an upload's temp file."""

    views: list[memoryview]
    offset: int
    size: int


IOV_MAX = 1024  # Linux's limit of buffers per pwritev
SYNC_BYTES = 32 << 20  # an upload's temp file is fdatasynced each time this much is written


def _pwrite_all(fd: int, views: list[memoryview], offset: int) -> None:
    """pwritev until every view is written (a regular file seldom takes less at once)."""
    index = 0
    while index < len(views):
        written = os.pwritev(fd, views[index : index + IOV_MAX], offset)
        if not written:
            raise OSError(errno.EIO, "the upload's temp file took no bytes")
        offset += written
        while index < len(views) and written >= len(views[index]):
            written -= len(views[index])
            index += 1
        if written:  # a new list: the block's own is being hashed in another thread
            views, index = [views[index][written:], *views[index + 1 :]], 0


@dataclass
class ReceivedUpload:
    """What a multipart upload held: its text fields and the file, already on disk."""

    fields: dict[str, str]
    file_name: str
    content_type: str
    sink: UploadSink
