"""Settings: one typed object built from CLI > config file > environment (and ``.env``) > defaults.

Example::

    settings = Settings.load(cli={"workspace_dir": "/data/ws"})
    settings.workspace_dir   # Path('/data/ws')

The config file is ``--config``, else ``RUNYARD_CONFIG``, else ``./runyard.yaml`` if present.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from runyard.configfile import read_config_file
from runyard.errors import ConfigError
from runyard.findconfig import config_path
from runyard.kubernetes_settings import KubernetesSettings
from runyard.resource_settings import Resources
from runyard.schedule_settings import ScheduleSettings, check_schedules
from runyard.studio_pages import StudioSettings

DEFAULT_ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "SYSTEMROOT",
)


class Target(BaseModel):
    """A remote runyard a Job API call may be forwarded to."""

    url: str
    token: str | None = None


class ResourceLimits(BaseModel):
    """Hard limits for one run or task: memory (MiB), processes, CPUs (fractions allowed),
    and disk (MiB; agent runs only).

    ``None`` leaves that resource unlimited. Memory, processes and CPUs are enforced by a
    cgroup (v2, or v1 where only that exists), else by setrlimit; what was enforced, and
    how, is recorded with the run. ``disk_mb`` bounds what an agent run and its tasks hold
    in the folders they may write, checked about once a second while they run
    (:mod:`runyard.runtime.diskquota`).
    """

    model_config = ConfigDict(extra="forbid")

    memory_mb: int | None = Field(None, ge=16)
    pids: int | None = Field(None, ge=8)
    cpu: float | None = Field(None, gt=0)
    disk_mb: int | None = Field(None, ge=1)

    @property
    def empty(self) -> bool:
        return self.memory_mb is None and self.pids is None and self.cpu is None


class StateSnapshots(BaseModel):
    """Checkpoints of a session's state folder, taken after each run: how many to keep per
    session, and the largest state folder (MiB) that is snapshotted at all."""

    model_config = ConfigDict(extra="forbid")

    keep_last: int = Field(20, ge=1)
    max_mb: int = Field(1024, ge=0)


FinishedState = Literal["succeeded", "failed", "cancelled"]
FINISHED_STATES: tuple[FinishedState, ...] = ("succeeded", "failed", "cancelled")


class Retention(BaseModel):
    """What ``runyard gc`` (and the server, every ``interval_seconds``) removes of finished work.

    A terminal task whose state is in ``states`` goes when it finished more than
    ``max_age_days`` ago and is not among the newest ``keep_last_per_task`` terminal tasks
    of its registered task name (either rule alone when the other is unset; nothing when
    both are). Run workspaces of agent runs that ended more than ``max_age_days`` ago go too.
    Earlier runs kept by fixed-name reruns (``.history``) go beyond the newest ``keep_runs``
    per task or when older than ``max_age_days``.
    """

    model_config = ConfigDict(extra="forbid")

    max_age_days: float | None = Field(None, gt=0)
    keep_last_per_task: int | None = Field(None, ge=0)
    keep_runs: int | None = Field(None, ge=0)
    states: list[FinishedState] = Field(default_factory=lambda: list(FINISHED_STATES), min_length=1)
    interval_seconds: float = Field(3600.0, ge=0.1)

    @property
    def configured(self) -> bool:
        return self.max_age_days is not None or self.keep_last_per_task is not None

    @property
    def periodic(self) -> bool:
        """Whether the server collects every ``interval_seconds``: any rule is set."""
        return self.configured or self.keep_runs is not None


class SyncSettings(BaseModel):
    """Task sync. Sending: with ``target`` set, push each finished task of ``task_types``
    (all when empty) to that ``targets`` entry, through an outbox that survives restarts.
    Receiving: a task whose tar would write more than ``max_task_mb`` MiB is refused (413)."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(None, min_length=1)
    task_types: list[str] = Field(default_factory=list)
    max_task_mb: int = Field(10240, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RUNYARD_", env_file=".env", extra="ignore", env_nested_delimiter="__"
    )

    workspace_dir: Path = Path(".runyard")
    log_dir: Path = Path("logs")
    # who may read the workspace and the logs: the server's user alone ("private": folders
    # 0700, files 0600), or its group too ("group": 2770/0660); never other users
    workspace_mode: Literal["private", "group"] = "private"
    # the server log's level (<log_dir>/server.log): access lines are "info"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    token: str | None = None
    auth: bool = True
    # how long the one-time code of a Studio login link (serve's banner, runyard studio) holds
    login_link_seconds: float = Field(300.0, gt=0, le=3600)
    # how long a Studio tab stays signed in by such a link (ended sooner by a server restart)
    studio_session_hours: float = Field(12.0, gt=0, le=720)
    allowed_hosts: list[str] = Field(default_factory=list)
    allowed_origins: list[str] = Field(default_factory=list)
    targets: dict[str, Target] = Field(default_factory=dict)
    machine_check_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        description="How long list_machines waits for each target's machine_status before "
        "reporting it unhealthy",
    )
    max_concurrent_tasks: int = Field(8, ge=1, le=1024)
    # of those, what the tasks of one agent run (of its session) may hold at once; its
    # further tasks wait queued without holding up anyone else's
    agent_task_slots: int = Field(2, ge=1, le=1024)
    cancel_grace_seconds: float = Field(5.0, gt=0)
    # plain tasks get the server's environment minus runyard's secrets ("inherit"), or only
    # env_allowlist ("strict"); agent runs and their tasks always get the allow-list only
    task_env: Literal["inherit", "strict"] = "inherit"
    env_allowlist: list[str] = Field(default_factory=lambda: list(DEFAULT_ENV_ALLOWLIST))
    worker_env: dict[str, str] = Field(default_factory=dict)
    prefork: bool = True
    # the server's event loop: uvloop's where it is installed ("auto"), or one of the two
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    max_body_bytes: int = Field(1 << 20, ge=1024)
    # slow clients (api/slowclients.py): a request's head must be in within this many seconds
    header_timeout_seconds: float = Field(10.0, gt=0, le=600)
    # a request body that sends nothing for this long gets 408 (inactivity, not total time)
    body_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    # an idle keep-alive connection is closed after this long (uvicorn's timeout_keep_alive)
    keep_alive_seconds: float = Field(5.0, gt=0, le=600)
    # open TCP connections from one client address; past it a new one is closed at once
    max_connections_per_client: int = Field(64, ge=1, le=65536)
    # below this much free space new work (submits, sessions, uploads, runs) is refused (507)
    # and queued tasks and agent runs wait instead of launching (0: neither)
    min_free_mb: int = Field(512, ge=0)
    sse_heartbeat_seconds: float = Field(15.0, gt=0, le=15.0)
    mcp_relay_probe_seconds: float = Field(
        5.0, gt=0, le=600,
        description="How often runyard mcp, relaying to a server, asks its /health while calls "
        "are pending",
    )  # fmt: skip
    mcp_relay_connect_seconds: float = Field(
        10.0, gt=0, le=600,
        description="How long runyard mcp, relaying to a server, waits to connect, to send a "
        "message and for /health before it answers the calls pending with an error",
    )  # fmt: skip
    # agent-run backend
    upload_max_bytes: int = Field(4 << 30, ge=1)
    allowed_mount_roots: list[Path] = Field(default_factory=list)
    agent_package: Path | None = None
    agent_packages_dir: Path | None = None
    agent_sandbox: str = Field("auto", pattern="^(auto|bwrap|none)$")
    agent_network: bool = False
    agent_run_uid: int | None = None
    agent_run_gid: int | None = None
    agent_max_final_answer_bytes: int = Field(256 * 1024, ge=1024)
    agent_run_timeout_seconds: float = Field(3600.0, gt=0)
    # agent runs running at once, all sessions together (one per session in any case)
    max_concurrent_runs: int = Field(8, ge=1, le=1024)
    agent_executor: str = Field("local", pattern="^(local|kubernetes)$")
    # where task workers run: this host, or one Kubernetes Job each (a task definition's
    # entry in task_executors, then a submit's ``executor`` argument, override it)
    task_executor: Literal["local", "kubernetes"] = "local"
    task_executors: dict[str, Literal["local", "kubernetes"]] = Field(default_factory=dict)
    kubernetes: KubernetesSettings | None = None
    agent_python: Path | None = None
    agent_limits: ResourceLimits = Field(
        default_factory=lambda: ResourceLimits(memory_mb=2048, pids=512, cpu=None, disk_mb=10240)
    )
    task_limits: ResourceLimits = Field(
        default_factory=lambda: ResourceLimits(memory_mb=None, pids=None, cpu=None)
    )
    task_resources: dict[str, Resources] = Field(
        default_factory=dict,
        description="Default resources per task name ({cpus, memory_mb, gpus, gpu_type}): "
        "each field set here wins over the task class's, a submit's wins over it",
    )
    gpus: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None,
        max_length=64,
        description="The GPU device indices runyard hands out to local task runs (each run "
        "sees only its own through CUDA_VISIBLE_DEVICES); unset: every GPU NVML reports, "
        "none without the gpu extra or a driver; []: runyard controls no GPU",
    )
    state_snapshots: StateSnapshots = Field(
        default_factory=lambda: StateSnapshots(keep_last=20, max_mb=1024)
    )
    retention: Retention = Field(
        default_factory=lambda: Retention(
            max_age_days=None, keep_last_per_task=None, keep_runs=None, interval_seconds=3600.0
        )
    )
    sync: SyncSettings = Field(
        default_factory=lambda: SyncSettings(target=None, task_types=[], max_task_mb=10240)
    )
    allow_plugin_install: bool = Field(
        False,
        description="Answer install_plugin and uninstall_plugin (admin only): pip run on the "
        "server's own interpreter. Off: both are refused naming this setting",
    )
    plugin_install_timeout_seconds: float = Field(
        300.0, gt=0, le=3600, description="How long one plugin's pip install or uninstall may take"
    )
    files_max_upload_mb: int = Field(
        512,
        ge=1,
        le=1 << 20,
        description="The largest file AxonX's POST /files takes (MiB) into the workspace's "
        "tmp/; a larger one is refused with 413 and nothing is kept",
    )
    # cron schedules by name (runyard.schedules): AxonX's fields plus catch_up, tick_argument
    schedules: dict[str, ScheduleSettings] = Field(default_factory=dict)
    studio: StudioSettings = Field(
        default_factory=lambda: StudioSettings(pages={}),
        description="The Studio's operations pages (studio.pages, AxonX's shape): entries of "
        "its navigation, listed by the list_studio_pages job",
    )
    allow_python_job: bool = Field(
        False,
        description="Answer the python job (admin only): code run in a fresh interpreter "
        "under task_limits and its timeout. Off: the job is refused naming this setting",
    )
    allow_self_update: bool = Field(
        False,
        description="Answer update_from_pip, update_from_git and restart_service (admin only). "
        "Off: they are refused naming this setting",
    )
    self_update_requirement: str = Field(
        "runyard", min_length=1, description="What update_from_pip installs (pip --upgrade)"
    )
    self_update_git: str | None = Field(
        None,
        min_length=1,
        description="What update_from_git installs, a pip VCS requirement such as "
        "'runyard @ git+https://host/runyard.git@main'; unset: update_from_git is refused",
    )
    self_update_timeout_seconds: float = Field(
        600.0, gt=0, le=3600, description="How long an update's pip install may take"
    )

    @field_validator("schedules")
    @classmethod
    def _schedule_names(cls, value: dict[str, ScheduleSettings]) -> dict[str, ScheduleSettings]:
        return check_schedules(value)

    @model_validator(mode="after")
    def _disk_quota_for_agent_runs(self) -> Settings:
        if self.task_limits.disk_mb is not None:
            raise ValueError(
                "task_limits.disk_mb is not supported: a disk quota applies to agent runs and "
                "their tasks (agent_limits.disk_mb)"
            )
        return self

    @field_validator("gpus")
    @classmethod
    def _distinct_gpus(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"gpus lists a device twice: {value}")
        return value

    @model_validator(mode="after")
    def _kubernetes_configured(self) -> Settings:
        uses = [f"task_executor: {self.task_executor}"] if self.task_executor != "local" else []
        uses += [f"task_executors.{t}" for t, e in self.task_executors.items() if e != "local"]
        if uses and self.kubernetes is None:
            raise ValueError(
                f"{uses[0]} needs a 'kubernetes:' settings block (at least kubernetes.image)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # ``load`` passes the config file's values with the command line's, as init values:
        # the file ranks right below the command line and above the environment
        return (init_settings, env_settings, dotenv_settings)

    @classmethod
    def load(cls, cli: dict[str, Any] | None = None, config_file: Path | None = None) -> Settings:
        """Build settings; ``cli`` holds only the options the user actually gave.

        An unknown key in the config file is a ``ConfigError`` naming the closest valid one.
        """
        return cls.load_with_origins(cli, config_file)[0]

    @classmethod
    def load_with_origins(
        cls, cli: dict[str, Any] | None = None, config_file: Path | None = None
    ) -> tuple[Settings, dict[str, str]]:
        """``load``, plus where each setting came from: ``command line``, the config file's
        path, ``env RUNYARD_X``, ``.env`` or ``default``."""
        overrides = {k: v for k, v in (cli or {}).items() if v is not None}
        path = config_path(config_file)
        from_file = read_config_file(cls, path) if path is not None else {}
        try:
            settings = cls(**{**from_file, **overrides})
        except ValidationError as exc:
            raise ConfigError(f"Invalid settings: {exc}") from exc
        given = [("command line", set(overrides)), (str(path or ""), set(from_file))]
        return settings, _origins(cls, given)


def _origins(cls: type[Settings], given: list[tuple[str, set[str]]]) -> dict[str, str]:
    """The strongest source that set each field, ``default`` when none did."""
    environment = [
        ("env", set(EnvSettingsSource(cls)())), (".env", set(DotEnvSettingsSource(cls)())),
    ]  # fmt: skip
    found = {name: "default" for name in cls.model_fields}
    for label, names in reversed([*given, *environment]):
        for name in names & set(found):
            found[name] = _env_label(name) if label == "env" else label
    return found


def _env_label(field: str) -> str:
    name = f"RUNYARD_{field.upper()}"
    if name in os.environ:
        return f"env {name}"
    nested = sorted(key for key in os.environ if key.upper().startswith(name + "__"))
    return f"env {nested[0]}" if nested else f"env {name}"
