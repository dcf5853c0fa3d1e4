"""The tar members of one synced task, and the rules both ends hold them to.

A task travels as ``task/<path>`` members, one for each plain file and folder of its
folder, and at most one ``log`` member, its run's log. A ``task/`` name must stay inside
the task: relative, no ``.``, ``..``, empty or hidden component, no NUL or backslash, each
component at most 255 bytes, at most :data:`MAX_DEPTH` components and 4096 bytes in all.
A member is a regular file or a folder (tar types ``0``, NUL and ``5``): links, devices,
FIFOs and sparse files are not. The sender walks only what these rules allow; the
receiver refuses the whole task for one member that breaks them.

:class:`BoundedTarInfo` is the receiver's member class for :mod:`tarfile`: it refuses a
sparse member (GNU type ``S``, or a PAX ``GNU.sparse.*`` header) *before* tarfile reads
its map or fills its holes (a 3 KB sparse tar would expand to gigabytes of zeros), and
an extended header (PAX, GNU long name) over :data:`MAX_HEADER_BYTES`, which tarfile
would otherwise read whole into memory::

    with tarfile.open(fileobj=reader, mode="r|", tarinfo=BoundedTarInfo) as tar:
        for member in tar:
            parts = task_parts(member.name)
"""

from __future__ import annotations

import tarfile
from typing import Any

from runyard.errors import UnsafePath
from runyard.workspace.safefs import split_relative

TASK_PREFIX = "task/"
LOG_MEMBER = "log"
MAX_DEPTH = 32  # components of a path inside the task folder
MAX_MEMBERS = 1_000_000
BLOCK = tarfile.BLOCKSIZE
CHUNK = 1 << 20  # file bodies are read and written in chunks of this size
MAX_HEADER_BYTES = 1 << 20  # one PAX or GNU long-name header
FILE_TYPES = frozenset({tarfile.REGTYPE, tarfile.AREGTYPE})
EXTENDED_TYPES = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }  # fmt: skip
)


class RefusedHeader(tarfile.TarError):
    """A tar header the receiver will not process (sparse, or an oversized extension);
    not a ``HeaderError``, so tarfile neither swallows it nor takes it for the end."""


def check_parts(relative: str) -> list[str]:
    """The components of a path inside the task folder, or :class:`UnsafePath`."""
    parts = split_relative(relative)
    if len(parts) > MAX_DEPTH:
        raise UnsafePath(relative[:64] + "...", f"deeper than {MAX_DEPTH} folders")
    return parts


def task_parts(name: str, *, directory: bool) -> list[str]:
    """The components under the task folder of member ``name`` (``task/<path>``; a
    folder's name may end with one ``/``), or :class:`UnsafePath` saying which rule fails."""
    if not name.startswith(TASK_PREFIX):
        raise UnsafePath(name[:64], f"a member is {TASK_PREFIX}<path> or {LOG_MEMBER}")
    relative = name[len(TASK_PREFIX) :]
    if directory and relative.endswith("/"):
        relative = relative[:-1]
    return check_parts(relative)


class BoundedTarInfo(tarfile.TarInfo):
    """A :class:`tarfile.TarInfo` that refuses sparse members and oversized extended
    headers as they are read (see the module docstring)."""

    def _proc_member(self, archive: tarfile.TarFile) -> Any:
        if self.type == GNU_SPARSE:
            raise RefusedHeader(f"{self.name!r} is a sparse file; sparse members are refused")
        if self.type in EXTENDED_TYPES and self.size > MAX_HEADER_BYTES:
            raise RefusedHeader(
                f"an extended header of {self.size} bytes (at most {MAX_HEADER_BYTES})"
            )
        return super()._proc_member(archive)  # type: ignore[misc]

    # The PAX sparse formats 0.0, 0.1 and 1.0: tarfile calls these once it has read the
    # PAX header that announces one; refused before the map is read.
    def _proc_gnusparse_00(self, *args: Any) -> None:
        raise RefusedHeader(_PAX_SPARSE)

    def _proc_gnusparse_01(self, *args: Any) -> None:
        raise RefusedHeader(_PAX_SPARSE)

    def _proc_gnusparse_10(self, *args: Any) -> None:
        raise RefusedHeader(_PAX_SPARSE)

    def _apply_pax_info(self, pax_headers: dict[str, str], *args: Any) -> None:
        # any GNU.sparse key: GNU.sparse.realsize alone would set the member's size
        if any(key.startswith("GNU.sparse.") for key in pax_headers):
            raise RefusedHeader(_PAX_SPARSE)
        super()._apply_pax_info(pax_headers, *args)  # type: ignore[misc]


GNU_SPARSE = tarfile.GNUTYPE_SPARSE
_PAX_SPARSE = "a PAX GNU.sparse member (a sparse file); sparse members are refused"
