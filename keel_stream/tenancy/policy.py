"""The `policy` part of the tenant configuration document: which tool calls need a decision.

    "policy": {"tools": {
        "note":  {"approval": "always", "outcomes": ["approve", "edit", "reject"]},
        "docs__delete": {"approval": {"when": [{"argument": "/path", "matches": "^/prod/"}]}},
        "*":     {"approval": "never"}
    }}

A tool's own entry wins over "*"; a tool with neither is never gated. `when` gates the call when
any of its conditions holds on the call's arguments (each condition names an argument by JSON
pointer and one test).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "DEFAULT_EXPIRY_S",
    "Condition",
    "HooksSettings",
    "Policy",
    "SubagentSettings",
    "ToolPolicy",
    "When",
]

DEFAULT_EXPIRY_S: Final = 7 * 24 * 3600
"""A decision nobody answers is answered by the system after a week, unless the policy says."""
_MISSING: Final = object()
ToolName = Annotated[str, StringConstraints(pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,63})$")]
Pointer = Annotated[str, StringConstraints(pattern=r"^(/[^/]*)*$", max_length=256)]
HumanOutcome = Literal["approve", "edit", "reject", "respond"]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)


def _at(document: Any, pointer: str) -> Any:
    """RFC 6901: the value at `pointer`, or _MISSING."""
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(document, Mapping) and part in document:
            document = document[part]
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return _MISSING
    return document


class Condition(_Part):
    argument: Pointer
    equals: Any = None
    one_of: Annotated[list[Any], Field(min_length=1, max_length=64)] | None = None
    matches: Annotated[str, StringConstraints(max_length=200)] | None = None
    exists: bool | None = None

    @model_validator(mode="after")
    def _one_test(self) -> Self:
        tests = [t for t in ("equals", "one_of", "matches", "exists") if t in self.model_fields_set]
        if len(tests) != 1:
            raise ValueError("a condition has exactly one of equals, oneOf, matches, exists")
        if self.matches is not None:
            try:
                re.compile(self.matches)
            except re.error as exc:
                raise ValueError(f"matches is not a regular expression: {exc}") from None
        return self

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        value = _at(arguments, self.argument)
        if self.exists is not None:
            return (value is not _MISSING) == self.exists
        if value is _MISSING:
            return False
        if self.one_of is not None:
            return value in self.one_of
        if self.matches is not None:
            return isinstance(value, str) and re.search(self.matches, value[:10_000]) is not None
        return bool(value == self.equals)


class When(_Part):
    when: Annotated[list[Condition], Field(min_length=1, max_length=16)]


def _approve_or_reject() -> list[HumanOutcome]:
    return ["approve", "reject"]


class ToolPolicy(_Part):
    approval: Literal["always", "never"] | When
    outcomes: Annotated[list[HumanOutcome], Field(min_length=1)] = Field(
        default_factory=_approve_or_reject
    )
    expires_after_s: Annotated[int, Field(gt=0, le=365 * 24 * 3600)] = DEFAULT_EXPIRY_S
    on_expire: Literal["reject", "cancel"] = "reject"

    def gates(self, arguments: Mapping[str, Any]) -> bool:
        if isinstance(self.approval, When):
            return any(c.holds(arguments) for c in self.approval.when)
        return self.approval == "always"


class Policy(_Part):
    tools: Annotated[dict[ToolName, ToolPolicy], Field(max_length=256)] = Field(
        default_factory=dict
    )

    def for_call(self, tool: str, arguments: Mapping[str, Any]) -> ToolPolicy | None:
        """The policy that gates this call, or None when it runs without a decision."""
        policy = self.tools.get(tool, self.tools.get("*"))
        return policy if policy is not None and policy.gates(arguments) else None


class SubagentSettings(_Part):
    """`settings.subagents`: how deep a tree of subagents may grow and how many it may hold."""

    max_depth: Annotated[int, Field(ge=0, le=8)] = 3
    """0: the model is offered no `delegate` tool."""
    max_per_tree: Annotated[int, Field(ge=1, le=1000)] = 50


HookHost = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.:/\[\]_-]{1,255}$")]


class HooksSettings(_Part):
    """`hooks`: which non-public receivers this tenant's webhooks may reach. Each entry is a host
    name, an address or a CIDR; a non-public address is reached only when the operator allows it
    (KEEL_HOOKS_ALLOWED_HOSTS) and this list names it too, so a tenant narrows the operator's
    allowlist and never widens it. Empty (the default): public receivers only."""

    allowed_hosts: Annotated[list[HookHost], Field(max_length=64)] = Field(default_factory=list)
