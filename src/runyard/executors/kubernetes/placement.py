"""Where runs go and whose they are: the node hostPath pods are pinned to, and this
server's instance id (the ``runyard.dev/instance`` label on every object it creates).

    settings = resolve_settings(settings)          # node and instance filled in, or ConfigError
    instance = workspace_instance(workspace_dir)   # read, or made once and recorded
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from runyard.errors import ConfigError
from runyard.kubernetes_settings import KubernetesSettings

NODE_ENV = "NODE_NAME"  # set from the downward API (spec.nodeName) in runyard's own pod
DEFAULT_INSTANCE = "runyard"
INSTANCE_FILE = "kubernetes-instance"


def host_node(settings: KubernetesSettings) -> str | None:
    """The node runyard itself runs on: ``node_name``, else ``$NODE_NAME``."""
    return settings.node_name or os.environ.get(NODE_ENV) or None


def resolve_settings(settings: KubernetesSettings) -> KubernetesSettings:
    """``settings`` with the node and instance in force.

    In hostPath mode a pod sees the folders of whichever node it lands on, so it must land
    on runyard's node: without a known node and without a ``node_selector`` (that the
    operator vouches for) the executor refuses to start.
    """
    node = host_node(settings)
    if settings.volume_mode == "hostPath" and node is None and not settings.node_selector:
        raise ConfigError(
            "kubernetes.volume_mode 'hostPath' mounts this host's folders, so run pods must "
            "land on this node: set kubernetes.node_name (or NODE_NAME from the downward API "
            "when runyard runs in the cluster), or a kubernetes.node_selector that picks it"
        )
    instance = settings.instance or DEFAULT_INSTANCE
    return settings.model_copy(update={"node_name": node, "instance": instance})


def workspace_instance(workspace_dir: Path) -> str:
    """This workspace's instance id, made on first use and recorded in the workspace, so
    a restarted server still knows (and sweeps) its own objects and no other server's."""
    path = workspace_dir / INSTANCE_FILE
    try:
        recorded = path.read_text().strip()
    except FileNotFoundError:
        recorded = ""
    if recorded:
        return recorded
    made = f"ry-{secrets.token_hex(8)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another process recorded one first: use it
        return path.read_text().strip() or made
    with os.fdopen(fd, "w") as handle:
        handle.write(made + "\n")
    return made
