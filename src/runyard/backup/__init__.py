"""Backup and restore of a workspace and its logs while the server runs (no web stack).

create_backup(workspace_dir, log_dir, Path("b.tar.gz"))   # one streamed tar + manifest
verify_backup(Path("b.tar.gz"))                             # every sha256 re-checked
restore_backup(Path("b.tar.gz"), new_workspace, new_logs)   # empty folders only
"""

from runyard.backup.create import create_backup
from runyard.backup.errors import BackupError
from runyard.backup.manifest import Manifest
from runyard.backup.restore import restore_backup
from runyard.backup.verify import verify_backup

__all__ = ["BackupError", "Manifest", "create_backup", "restore_backup", "verify_backup"]
