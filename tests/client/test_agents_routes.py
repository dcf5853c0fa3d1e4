"""The agents client reaches every /api/v1 route `runyard agent` uses: mount grants,
checkpoints, fork and restore, packages. Both clients, against a real server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.client import AsyncClient, Client
from runyard.client.agent_models import AgentPackage, Checkpoint, MountGrant
from runyard.errors import HTTPError
from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def mounts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mounts")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, mounts: Path) -> Iterator[ServerProcess]:
    config = {"agent_sandbox": "none", "allowed_mount_roots": [str(mounts)]}
    proc = start_server(tmp_path_factory.mktemp("agent-routes"), config=config)
    try:
        yield proc
    finally:
        proc.stop()


def test_grants_checkpoints_forks_and_packages(srv: ServerProcess, mounts: Path) -> None:
    shared = mounts / "shared"
    shared.mkdir()
    with Client(srv.url, srv.token) as client:
        agents = client.agents
        session = agents.create_session("routes")
        grant = agents.create_grant(session, "data", str(shared))
        assert isinstance(grant, MountGrant) and (grant.name, grant.access) == ("data", "ro")
        assert grant.host_path == str(shared) and not grant.revoked
        assert [g.id for g in agents.list_grants(session)] == [grant.id]
        assert agents.revoke_grant(grant).revoked
        assert agents.list_grants(session.id)[0].revoked
        with pytest.raises(HTTPError) as refused:
            agents.create_grant(session, "bad", str(shared), access="everything")
        assert 400 <= refused.value.status_code < 500

        packages = agents.list_packages()
        assert packages and all(isinstance(p, AgentPackage) for p in packages)
        assert sum(p.default for p in packages) == 1

        run = agents.wait_run(agents.create_run(session, "remember this"), timeout=120)
        assert run.state == "succeeded", run.error
        checkpoints = agents.list_checkpoints(session)
        assert [type(c) for c in checkpoints] == [Checkpoint]
        assert checkpoints[0].run_id == run.id
        fork = agents.fork_session(session, run, title="forked")
        assert fork.id != session.id and fork.title == "forked" and fork.forked_from
        restored = agents.restore_session(session, run.id)
        assert restored.id == session.id


def test_the_async_agents_client_has_them_too(srv: ServerProcess, mounts: Path) -> None:
    async def scenario() -> tuple[MountGrant, list[AgentPackage], list[Checkpoint], str]:
        async with AsyncClient(srv.url, srv.token) as client:
            agents = client.agents
            session = await agents.create_session("async routes")
            grant = await agents.create_grant(session, "data", str(mounts), access="rw")
            revoked = await agents.revoke_grant(grant.id)
            listed = await agents.list_grants(session)
            assert [g.id for g in listed] == [grant.id] and revoked.revoked
            packages = await agents.list_packages()
            run = await agents.wait_run(await agents.create_run(session, "hi"), timeout=120)
            checkpoints = await agents.list_checkpoints(session)
            fork = await agents.fork_session(session, run)
            await agents.restore_session(session, run)
            return grant, packages, list(checkpoints), fork.id

    grant, packages, checkpoints, fork_id = asyncio.run(scenario())
    assert grant.access == "rw" and packages and fork_id
    assert len(checkpoints) == 1 and isinstance(checkpoints[0], Checkpoint)
