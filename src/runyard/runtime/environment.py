"""What of the server's environment a worker or run receives.

    env = task_environment(settings)     # a plain (admin-submitted) task's base environment
    env = allowlisted(settings)          # a plain agent run's host variables: the allow-list only

Plain tasks inherit the server's environment by default (``task_env: inherit``), so
``HF_TOKEN``, ``CUDA_VISIBLE_DEVICES``, ``AWS_*`` and the like reach training code as they
would from a shell. ``task_env: strict`` passes only the variables named in
``env_allowlist``. Either way ``worker_env`` is added on top, and runyard's own secrets are
taken out last, so not even ``worker_env`` or an allow-list entry can hand them to a task:

- every ``RUNYARD_*`` variable of the server's environment (in inherit mode): they configure
  the server, not the task, and carry its token (``RUNYARD_TOKEN``) and the tokens of its
  forwarding targets (``RUNYARD_TARGETS``); runyard sets the ones a worker reads itself;
- ``RUNYARD_TOKEN`` whatever its origin;
- any variable whose value contains a token runyard holds: the server's token (configured
  or generated) and each ``targets`` token — whatever the variable is called, and wherever
  in the value the token sits (``AUTH=Bearer <token>``, a URL with it in its query).

Run tokens are not among them: the server keeps only their hashes, makes a new one for
each run and hands it to that run alone (``RUNYARD_API_TOKEN``, set after this filter), so
no configured variable can hold one it knows.

``PWD`` and ``OLDPWD`` are not inherited either: they name the server's folder, not the
task's.

Agent runs and run-submitted tasks never call ``task_environment``: their code is not the
admin's, so they keep a strict allow-list whatever ``task_env`` says (a sandboxed run gets
none of the host's variables at all; a plain, unsandboxed run gets ``env_allowlist``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from runyard.config import Settings

RUNYARD_PREFIX = "RUNYARD_"
TOKEN_VARIABLE = "RUNYARD_TOKEN"
# where the server's shell was: wrong for a task, which runs in its own folder
SHELL_PLACE = frozenset({"PWD", "OLDPWD"})


def task_environment(settings: Settings) -> dict[str, str]:
    """The server's variables a plain task gets (per ``task_env``), then ``worker_env``."""
    if settings.task_env == "strict":
        env = allowlisted(settings)
    else:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(RUNYARD_PREFIX) and k not in SHELL_PLACE
        }
    env.update(settings.worker_env)
    return without_secrets(env, settings)


def allowlisted(settings: Settings) -> dict[str, str]:
    """The variables named in ``env_allowlist`` that this process has, minus secrets."""
    env = {name: os.environ[name] for name in settings.env_allowlist if name in os.environ}
    return without_secrets(env, settings)


def without_secrets(env: Mapping[str, str], settings: Settings) -> dict[str, str]:
    """``env`` without ``RUNYARD_TOKEN`` and without any variable whose value contains a
    runyard token anywhere (``Bearer <token>`` as much as ``<token>``)."""
    secrets = runyard_secrets(settings)
    return {
        name: value
        for name, value in env.items()
        if name != TOKEN_VARIABLE and not any(secret in value for secret in secrets)
    }


def runyard_secrets(settings: Settings) -> frozenset[str]:
    """The token values runyard holds: the server's own and its targets'."""
    tokens = {settings.token, *(target.token for target in settings.targets.values())}
    return frozenset(token for token in tokens if token)
