"""Run the server: uvicorn on TCP (and on the agent-run Unix socket), record its address.

Auth is on by default, as in Jupyter: without a configured token ``serve`` reuses the one
``<workspace>/server.json`` kept from the last start, or generates one (``--rotate-token``:
always a new one). ``--no-auth`` (``auth: false``) is an explicit opt-out, allowed on
loopback only and warned about; off loopback it is refused at start, before anything is
bound. The address and the token in force go to ``server.json`` (mode 0600) so the CLI and
``Client.from_workspace`` of the same user find the server of the workspace and sign in.
The banner's Studio link carries a one-time login code, never the token
(:mod:`runyard.api.login`).

The port listens before the app is built (api/front.py): what runs before it is only the
settings, the checks above, the workspace's modes (api/workspace_privacy.py), the server lock
and the log.

On a full disk, where ``server.json`` cannot be written, the server starts read-only
(api/readonly.py): its banner says so and how a client connects (``RUNYARD_URL`` and where
the token is), and it writes the file, leaving read-only mode, once space is freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from runyard.api import serverlog
from runyard.api.address import kept_token, leave_token, server_file, write_server_file
from runyard.api.allocator import keep_freed_buffers
from runyard.api.auth import BearerAuth
from runyard.api.front import Front
from runyard.api.guard import agent_socket_channel
from runyard.api.login import LoginCodes, lifetime_words
from runyard.api.readonly import ReadOnly, read_only_banner
from runyard.api.restart import reexec_if_requested
from runyard.api.serverlock import hold_server_lock
from runyard.api.serverlog import AccessLog
from runyard.api.slowclients import guarded_protocol
from runyard.api.stopping import CutShort, StopBound, drain_seconds, reap_children
from runyard.api.workspace_privacy import close_workspace, report_closed
from runyard.config import Settings
from runyard.errors import ConfigError
from runyard.faults import fault_delay
from runyard.runtime.proctitle import set_title
from runyard.workspace.atomic import read_json_tolerant
from runyard.workspace.records import utcnow
from runyard.workspace.space import is_space_error

if TYPE_CHECKING:
    from runyard.api.services import Services

log = logging.getLogger("runyard.api")
BACKLOG = 2048  # uvicorn's: connections wait there until the loop accepts them


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(settings: Settings) -> None:
    if not settings.auth and not is_loopback(settings.host):
        raise ConfigError(
            f"refusing --no-auth on {settings.host}: without a token only loopback "
            "(127.0.0.1) may be bound; drop --no-auth to serve with a token"
        )


def with_token_in_force(
    settings: Settings, kept: str | None = None, *, rotate: bool = False
) -> Settings:
    """The settings the server runs with: the configured token; else the ``kept`` one (the
    last start's, from ``server.json``) unless ``rotate``; else a new one. No token at all
    with ``--no-auth``."""
    if not settings.auth:
        return settings.model_copy(update={"token": None})
    if settings.token:
        return settings
    if kept and not rotate:
        return settings.model_copy(update={"token": kept})
    return settings.model_copy(update={"token": secrets.token_urlsafe(32)})


def check_rotation(settings: Settings, rotate: bool) -> None:
    if rotate and (settings.token or not settings.auth):
        given = "--no-auth serves without one" if not settings.auth else "a token is configured"
        raise ConfigError(
            f"--rotate-token makes a new token, but {given} (--token, --token-file, "
            "RUNYARD_TOKEN or token: in the config): drop one of the two"
        )


def serve(settings: Settings, *, rotate_token: bool = False) -> None:
    """Serve until SIGINT/SIGTERM; ``rotate_token``: a new token, not the kept one."""
    check_binding(settings)
    check_rotation(settings, rotate_token)
    if not settings.auth:
        print(
            "warning: auth is off (--no-auth): every local user and program can use this "
            "server, with no token",
            file=sys.stderr,
            flush=True,
        )
    loop_factory = event_loop_factory(settings.event_loop)
    set_title("serve", str(settings.workspace_dir))  # what ps shows for this server
    keep_freed_buffers()  # request bodies without a page fault per piece
    tightened = close_workspace(settings)  # the umask first: all made from now on has it
    address_file = server_file(settings)
    lock_fd = hold_server_lock(Path(settings.workspace_dir), address_file)
    kept = kept_token(address_file)  # read under the lock: no other start reads it now
    settings = with_token_in_force(settings, kept, rotate=rotate_token)
    serverlog.configure(Path(settings.log_dir), settings.log_level, [settings.token or ""])
    report_closed(tightened, settings)
    tcp = _bind_tcp(settings.host, settings.port)  # listening: connections queue from now
    host, port = tcp.getsockname()[:2]
    url = f"http://{_url_host(host)}:{port}"
    record = {"url": url, "pid": os.getpid(), "token": settings.token, "started_at": utcnow()}
    leave = settings.token or kept  # for the next start; with --no-auth the one kept before
    codes = LoginCodes(settings.login_link_seconds)
    start = _Start(record, codes, leave, ReadOnly(), _token_source(settings, kept, address_file))
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            failure = runner.run(_run_all(tcp, settings, start))
    finally:
        os.close(lock_fd)
        reap_children()  # those that ended while it stopped: unwatched since, not reaped
    if failure is not None:  # the app could not be built: the error the start ends with
        raise failure
    reexec_if_requested()  # restart_service: the same command line again (api/restart.py)


def event_loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The server's event loop (the ``event_loop`` setting): uvloop's where it is installed
    (a dependency on Linux) for ``auto``, with the same asyncio API and its I/O, timers and
    thread hand-offs in C, for a few per cent less of the server's CPU a request
    (``bench/bench_loop.py``); None, asyncio's own loop, for ``asyncio`` or where uvloop is
    not installed. ``uvloop`` where it is not installed is a configuration error."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        if choice == "uvloop":
            raise ConfigError(
                f"event_loop: uvloop, but uvloop cannot be imported here ({exc}); install "
                "it (pip install uvloop) or set event_loop: auto"
            ) from exc
        return None
    return uvloop.new_event_loop


@dataclass(frozen=True)
class _Start:
    """What a start hands on: the ``record`` for ``server.json``, the login ``codes``, the
    token ``leave`` keeps for the next start, the ``read_only`` state a full disk sets, and
    ``token_source``, how a client finds the token when ``server.json`` cannot say it."""

    record: dict[str, Any]
    codes: LoginCodes
    leave: str | None
    read_only: ReadOnly
    token_source: str


def _token_source(settings: Settings, kept: str | None, address_file: Path) -> str:
    if not settings.auth:
        return " (no token: --no-auth)"
    if settings.token and settings.token != kept:
        return " and RUNYARD_TOKEN, the token configured (--token-file, RUNYARD_TOKEN, config)"
    if settings.token:
        return f' and RUNYARD_TOKEN, the "token" kept in {address_file}'
    return (" and a new token no file holds: sign in with the Studio link above, or restart "
            "with --token-file")  # fmt: skip


def _build(settings: Settings, start: _Start) -> tuple[Services, Any]:
    """The services and the app, in the front's thread while the port already answers."""
    from runyard.api.app import create_app  # FastAPI, the routes, the record models
    from runyard.api.services import Services

    fault_delay("serve.build")
    services = Services.build(settings, login_codes=start.codes, read_only=start.read_only)
    return services, create_app(settings, services)


async def _run_all(tcp: socket.socket, settings: Settings, start: _Start) -> BaseException | None:
    """Serve until asked to stop; the error of an app that could not be built, if any."""
    beside: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []  # the agent-run socket
    bound: list[_BoundSocket] = []  # its file, removed at the end

    def on_built(services: Services, app: Any) -> None:
        uds = _agent_socket(settings, services, CutShort(app, bound_stop))
        if uds is not None:
            server, socks, socket_file = uds
            bound.append(socket_file)
            beside.append((server, asyncio.create_task(server.serve(sockets=socks))))

    def on_failed(exc: BaseException) -> None:
        main.should_exit = True

    front = Front(settings, partial(_build, settings, start), on_built, on_failed)

    def leave_files() -> None:
        for socket_file in bound:
            socket_file.remove()
        _leave(server_file(settings), start.leave)

    bound_stop = StopBound(settings.cancel_grace_seconds, leave_files)
    config = _uvicorn_config(AccessLog(CutShort(front, bound_stop)), settings, lifespan="on")
    main = _Server(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _request_exit, [main], beside, bound_stop)
    serving = asyncio.create_task(main.serve(sockets=[tcp]))
    while not main.started and not serving.done():
        await asyncio.sleep(0.01)
    if main.started:  # recorded, then announced: whoever reads the line finds the file
        _record(server_file(settings), start)
        _announce(settings, start)
    try:
        await serving
    finally:
        start.read_only.stop()
        for server, _ in beside:
            server.should_exit = True
        await asyncio.gather(*(task for _, task in beside), return_exceptions=True)
        leave_files()
    return front.failure


def _record(path: Path, start: _Start) -> None:
    """``server.json`` now; on a full disk the server goes on read-only and writes it as
    soon as it can (api/readonly.py)."""
    write = partial(write_server_file, path, start.record)
    try:
        write()
    except OSError as exc:
        start.read_only.defer(path.name, write, exc)


def _leave(path: Path, token: str | None) -> None:
    current = read_json_tolerant(path)
    if not current or current.get("pid") != os.getpid():  # never written, or a later one's
        return
    try:  # the address goes, the token stays
        leave_token(path, token)
    except OSError as exc:
        if not is_space_error(exc):
            raise
        log.warning("%s keeps this stopped server's address: the disk is full (%s)", path, exc)


def _announce(settings: Settings, start: _Start) -> None:
    record, codes = start.record, start.codes
    url = record["url"]
    # a one-time code, not the token: browsers keep every address they open (history,
    # session restore, favicons), and what they keep of this one is spent within minutes
    studio = f"{url}/"
    if record["token"]:
        lasts = lifetime_words(codes.ttl_seconds)
        studio += f"#login={codes.issue()}  (one-time link, {lasts}; `runyard studio` for another)"
    # one write: start-up runs beside this, and a log line on stderr (often the same pipe)
    # must not land inside the banner, even with unbuffered output
    banner = (
        f"runyard serving {settings.workspace_dir} on {url}\n"
        f"  Studio: {studio}\n"
        "  try: runyard submit demo x=1 y=2 --wait\n"
    )
    if start.read_only.active:
        banner += read_only_banner(start.read_only.reason, url, start.token_source)
    sys.stdout.write(banner)
    sys.stdout.flush()


def _request_exit(
    main: list[uvicorn.Server], beside: list[tuple[uvicorn.Server, Any]], bound: StopBound
) -> None:
    """Every listener stops at once, each draining side by side (api/stopping.py)."""
    bound.arm()
    for server in [*main, *(server for server, _ in beside)]:
        server.force_exit = server.should_exit  # a second signal skips the graceful wait
        server.should_exit = True


def _agent_socket(settings: Settings, services: Services, app: Any) -> Any:
    agents = services.agents
    if agents is None:
        return None
    path = Path(agents.socket_path)
    temporary = agents.layout.make_socket_folder() != agents.layout.root / "sock"
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # bound under a temporary name, given its owner and mode, then renamed into place:
    # never connectable by others, not even for a moment
    staging = path.with_name(f".{os.getpid()}")  # no longer than the name it replaces
    staging.unlink(missing_ok=True)
    sock.bind(str(staging))
    _own_socket(staging, settings)
    os.replace(staging, path)
    socket_file = _BoundSocket(path, _identity(path.lstat()), temporary)
    guarded = BearerAuth(app, settings.token, agents.verify_run_token, require_run_token=True)
    channel = AccessLog(agent_socket_channel(guarded), "run-socket")
    config = _uvicorn_config(channel, settings, lifespan="off")
    return _Server(config), [sock], socket_file


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


@dataclass(frozen=True)
class _BoundSocket:
    """The agent socket this server bound: removed when it stops (uvicorn removes only
    the sockets it binds itself), with its ``/tmp/runyard-<hash>/`` folder when it has
    one, so stopped servers leave nothing in the temporary folder."""

    path: Path
    identity: tuple[int, int]
    temporary: bool  # in /tmp/runyard-<hash>/, not in the workspace

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            if _identity(self.path.lstat()) == self.identity:  # ours, not a later one's
                self.path.unlink()
            if self.temporary:
                self.path.parent.rmdir()  # only when empty


def _uvicorn_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """uvicorn logging through ours (serverlog): no dictConfig of its own, and no access
    line of its own (it would carry the raw query string, tokens included); a response's
    head and body in one write (api/onewrite.py); slow clients held to deadlines and a cap
    per address (api/slowclients.py)."""
    return uvicorn.Config(app, log_config=None, log_level=settings.log_level, access_log=False,
                          http=guarded_protocol(settings),
                          timeout_keep_alive=settings.keep_alive_seconds,
                          timeout_graceful_shutdown=drain_seconds(settings),
                          **options)  # fmt: skip


def _own_socket(path: Path, settings: Settings) -> None:
    """Owned by the runs' uid/gid with mode 0660, or 0600 when runs run as the server."""
    uid = settings.agent_run_uid if settings.agent_run_uid is not None else os.getuid()
    gid = settings.agent_run_gid if settings.agent_run_gid is not None else os.getgid()
    os.chown(path, uid, gid)
    own = uid == os.getuid() and gid == os.getgid()
    os.chmod(path, 0o600 if own else 0o660)


def _bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so,
    # and without it every reused connection waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"Cannot bind {host}:{port}: {exc.strerror}") from exc
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: ``_run_all`` handles SIGINT/SIGTERM so the
    address file is removed on the way out (uvicorn re-raises the signal at exit, which
    would end the process before any cleanup)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
