"""An agent package that answers with an OpenAI-compatible chat endpoint.

It reads ``in/run-context.json``, sends the system prompt, the session's earlier turns and
the new prompt to ``POST {OPENAI_BASE_URL}/chat/completions`` and writes the reply to
``out/final-answer.md``. Standard library only.

Configuration reaches it through the run's environment, which the server builds from
``worker_env`` (the server's own environment never reaches agent code)::

    # runyard.yaml
    agent_network: true                 # the sandbox has no network otherwise
    worker_env:
      OPENAI_BASE_URL: https://api.openai.com/v1
      OPENAI_API_KEY: sk-...
      OPENAI_MODEL: gpt-4o-mini

The key is sent to the endpoint only; it is never printed.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

WORKSPACE = Path(os.environ.get("RUNYARD_WORKSPACE", "/workspace"))
CONTEXT = Path(os.environ.get("RUNYARD_CONTEXT", str(WORKSPACE / "in" / "run-context.json")))
TIMEOUT = float(os.environ.get("OPENAI_TIMEOUT", "120"))


def messages_of(context: dict[str, Any]) -> list[dict[str, str]]:
    """The chat: system prompt, earlier user/assistant turns, then this run's prompt."""
    messages = []
    if context.get("systemPrompt"):
        messages.append({"role": "system", "content": context["systemPrompt"]})
    for turn in context.get("history", []):
        # runyard's own notes ("system" turns) are context for the model as well
        if turn.get("content"):
            messages.append({"role": turn["role"], "content": turn["content"]})
    messages.append({"role": "user", "content": context["userPrompt"]})
    return messages


def complete(messages: list[dict[str, str]]) -> str:
    """The endpoint's answer to ``messages`` (first choice)."""
    base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        raise SystemExit("openai-agent: OPENAI_API_KEY is not set (put it in worker_env)")
    body = {"model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), "messages": messages}
    request = urllib.request.Request(
        f"{base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
            answer = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"openai-agent: {base} answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise SystemExit(f"openai-agent: cannot reach {base}: {exc.reason}") from None
    return str(answer["choices"][0]["message"]["content"])


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main() -> int:
    context = json.loads(CONTEXT.read_text(encoding="utf-8"))
    messages = messages_of(context)
    print(f"openai-agent: run {context['runId']}, {len(messages)} messages", flush=True)
    answer = complete(messages)
    write_atomic(WORKSPACE / "out" / "final-answer.md", answer)
    print(f"openai-agent: wrote {len(answer)} characters", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
