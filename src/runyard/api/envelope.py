"""The JobResponse envelope, its model per job, and the envelope's text for an error.

Request bodies are read and validated by :mod:`runyard.api.requestbody`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runyard.errors import RunyardError


class JobResponse(BaseModel):
    answer: Any = None
    success: bool = True
    metadata: dict[str, Any] = Field(default_factory=dict)


def envelope_model(name: str, args: type[BaseModel]) -> type[BaseModel]:
    """``{"arguments": {...}, "target"?: str}`` with no other top-level field."""
    return type(
        f"{name.title().replace('_', '')}Request",
        (BaseModel,),
        {
            "__annotations__": {"arguments": args, "target": str | None},
            "model_config": ConfigDict(extra="forbid"),
            "arguments": Field(default_factory=args) if _all_optional(args) else Field(),
            "target": Field(None, description="Forward the call to this configured remote"),
        },
    )


def job_response(answer: Any, success: bool, metadata: dict[str, Any] | None = None) -> dict:
    return {"answer": answer, "success": success, "metadata": metadata or {}}


def error_answer(exc: BaseException) -> str:
    """``"ErrorType: message"``, naming the builtin a runyard error stands for."""
    return f"{error_type_name(exc)}: {exc}"


def error_type_name(exc: BaseException) -> str:
    if isinstance(exc, RunyardError):
        for klass in type(exc).__mro__:
            if klass.__module__ == "builtins" and klass not in (Exception, BaseException, object):
                return klass.__name__
    return type(exc).__name__


def _all_optional(model: type[BaseModel]) -> bool:
    return not any(field.is_required() for field in model.model_fields.values())
