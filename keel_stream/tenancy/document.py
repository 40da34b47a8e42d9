"""The tenant configuration document: one vocabulary for external providers and models.

One document per tenant (stored versioned by keel_stream.store.tenant_configs; the runtime's
own boot document comes from the file KEEL_EXTERNAL_CONFIG names) declares:

- ``external.backends`` / ``external.tools``: providers reached over stdio or http, and
  ``external.quota`` (``unmetered``: allow or deny, ``maxSessionsPerBackend``);
- ``settings.models``: the models a tenant may use (provider, model, system prompt,
  temperature, max tokens, compaction budget) and ``defaultModel``; an input picks one with
  ``user.message.selection.model``.

The schema invents nothing: every field is named here, in camelCase, and any other field is
refused. Values of ``env`` and ``headers`` are secret *references*, never values: exactly
``${NAME}``, ``env:NAME`` or ``secret:NAME`` (NAME = ``[A-Z_][A-Z0-9_]*``). A literal, say
``Bearer <token>``, is refused when the document is loaded, so it is never stored.

References resolve only when a provider starts: ``${NAME}`` and ``env:NAME`` from the runtime's
environment variable NAME, ``secret:NAME`` from ``KEEL_SECRET_<NAME>`` (secrets get a prefix of
their own so a provider's secret is never an ordinary variable by accident, and a secret store
can later take over that one form without changing documents).

``args`` and ``url`` may hold references too, and refuse secret-shaped literals
(keel_stream.tenancy.secrets); a stored document is read without that check (it may
predate it) and shown redacted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from keel_stream.errors import InvalidConfig, LiteralSecret
from keel_stream.tenancy import secrets
from keel_stream.tenancy.limits import LimitsSpec
from keel_stream.tenancy.policy import HooksSettings, Policy, SubagentSettings

__all__ = [
    "MINIMAL_ENV",
    "REDACTED",
    "SECRET_PREFIX",
    "BackendSpec",
    "Budget",
    "External",
    "ModelSettings",
    "ProviderSpec",
    "Quota",
    "SecretRef",
    "Settings",
    "TenantConfig",
    "ToolSpec",
    "load_boot_config",
    "load_config_file",
    "minimal_env",
    "parse_config",
    "parse_reference",
    "redact_env",
    "redacted",
    "resolve",
    "resolved_args",
    "resolved_url",
]

SECRET_PREFIX: Final = "KEEL_SECRET_"  # noqa: S105 - a variable-name prefix
MINIMAL_ENV: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER")
"""The only variables of the runtime a stdio provider inherits besides those it declares."""
REDACTED: Final = secrets.REDACTED

_NAME: Final = r"[A-Z_][A-Z0-9_]*"
_REFERENCE: Final = re.compile(
    rf"\$\{{(?P<braced>{_NAME})\}}|env:(?P<env>{_NAME})|secret:(?P<secret>{_NAME})"
)
_NOT_A_REFERENCE: Final = (
    "not a secret reference: use ${NAME}, env:NAME or secret:NAME "
    "(a literal value, `Bearer <token>` included, is refused and never stored)"
)


@dataclass(frozen=True, slots=True)
class SecretRef:
    """One parsed reference: where its value comes from when a provider starts."""

    source: Literal["env", "secret"]
    name: str
    text: str
    """The reference as written in the document."""

    @property
    def variable(self) -> str:
        """The runtime's environment variable holding the value."""
        return self.name if self.source == "env" else f"{SECRET_PREFIX}{self.name}"


def parse_reference(value: str) -> SecretRef | None:
    """The reference ``value`` spells, or None when it is anything else (a literal)."""
    match = _REFERENCE.fullmatch(value)
    if match is None:
        return None
    if match["secret"] is not None:
        return SecretRef("secret", match["secret"], value)
    return SecretRef("env", match["braced"] or match["env"], value)


def _reference(value: str) -> str:
    if parse_reference(value) is None:
        raise ValueError(_NOT_A_REFERENCE)
    return value


Reference = Annotated[str, AfterValidator(_reference)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
HeaderName = Annotated[str, StringConstraints(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]
Positive = Annotated[int, Field(gt=0)]


class _Document(BaseModel):
    """camelCase only, nothing unknown, no coercion ("60000" is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)


class Budget(_Document):
    """Resource limits of a stdio provider, set as rlimits on its process before it runs
    (keel_stream.gateway.budget); each is optional, a missing one inherits the runtime's."""

    cpu_seconds: Positive | None = None
    address_space_mb: Positive | None = None
    open_files: Positive | None = None
    processes: Positive | None = None
    """RLIMIT_NPROC: counted over every process of the runtime's user, not only this group."""


class ProviderSpec(_Document):
    """A provider: a stdio child (command, args, env, budget) or an http endpoint (url,
    headers)."""

    transport: Literal["stdio", "http"]
    command: NonEmpty | None = None
    args: list[str] = Field(default_factory=list)
    url: NonEmpty | None = None
    env: dict[EnvName, Reference] = Field(default_factory=dict)
    headers: dict[HeaderName, Reference] = Field(default_factory=dict)
    timeout_ms: Positive | None = None
    max_sessions: Positive | None = None
    budget: Budget | None = None

    @field_validator("args")
    @classmethod
    def _no_literal_secret_in_args(cls, args: list[str], info: ValidationInfo) -> list[str]:
        return secrets.checked_args(args, info.context)

    @field_validator("url")
    @classmethod
    def _no_literal_secret_in_url(cls, url: str | None, info: ValidationInfo) -> str | None:
        return secrets.checked_url(url, info.context)

    @model_validator(mode="after")
    def _fits_transport(self) -> Self:
        if self.transport == "stdio":
            if self.command is None:
                raise ValueError("transport stdio needs a command")
            if self.url is not None or self.headers:
                raise ValueError("transport stdio takes command, args and env, not url or headers")
        else:
            if self.url is None or not self.url.startswith(("http://", "https://")):
                raise ValueError("transport http needs an http:// or https:// url")
            if self.command is not None or self.args or self.env:
                raise ValueError("transport http takes url and headers, not command, args or env")
            if self.budget is not None:
                raise ValueError(
                    "transport http takes no budget: the runtime cannot bound a remote process "
                    "(set its limits where it runs)"
                )
        return self


class BackendSpec(ProviderSpec):
    """An external agent backend (the AgentBackend method set)."""


class ToolSpec(ProviderSpec):
    """An external tool server; its tools join the prompt's tool registry. ``protocol`` says
    which method set it speaks: ``keel`` (this project's ToolProvider: ``tools.list`` /
    ``tools.call``) or ``mcp`` (a Model Context Protocol server: ``tools/list`` /
    ``tools/call``, through the official MCP SDK)."""

    protocol: Literal["keel", "mcp"] = "keel"


class Quota(_Document):
    """``unmetered`` is the tenant's explicit choice for a backend that meters nothing:
    allow opens the session with metering=none, deny refuses to open it."""

    unmetered: Literal["allow", "deny"]
    max_sessions_per_backend: Positive | None = None


class External(_Document):
    backends: dict[Name, BackendSpec] = Field(default_factory=dict)
    tools: dict[Name, ToolSpec] = Field(default_factory=dict)
    quota: Quota | None = None
    """None: no choice was made, so unmetered sessions are refused (as with deny)."""

    @property
    def agents_active(self) -> bool:
        """The external-agent service runs only when backends are declared."""
        return bool(self.backends)

    @property
    def tools_active(self) -> bool:
        """The external-tools service runs only when tools are declared."""
        return bool(self.tools)


class ModelSettings(_Document):
    """A model the tenant may use with the native agent."""

    provider: NonEmpty
    model: NonEmpty
    system_prompt: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_tokens: Positive | None = None
    context_budget_chars: Positive | None = None


class Settings(_Document):
    models: dict[Name, ModelSettings] = Field(default_factory=dict)
    default_model: Name | None = None
    subagents: SubagentSettings = Field(default_factory=SubagentSettings)

    @model_validator(mode="after")
    def _default_is_declared(self) -> Self:
        if self.default_model is not None and self.default_model not in self.models:
            raise ValueError(f"defaultModel {self.default_model!r} is not one of settings.models")
        return self

    def model_for(self, selection: Mapping[str, object] | None) -> tuple[str, ModelSettings]:
        """The model an input selects (``selection.model``), else the default one."""
        chosen = (selection or {}).get("model", self.default_model)
        if not isinstance(chosen, str) or chosen not in self.models:
            listed = ", ".join(sorted(self.models)) or "none declared"
            raise InvalidConfig(f"selection.model: no model named {chosen!r} ({listed})")
        return chosen, self.models[chosen]


class TenantConfig(_Document):
    """The whole document; both parts may be left out."""

    external: External = Field(default_factory=External)
    settings: Settings = Field(default_factory=Settings)
    policy: Policy = Field(default_factory=Policy)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    hooks: HooksSettings = Field(default_factory=HooksSettings)

    def document(self) -> dict[str, Any]:
        """The document as JSON, in its own vocabulary (camelCase, only what was given)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _describe(exc: ValidationError) -> str:
    """Every problem with its path; never the offending value (it may be a secret)."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        path = ".".join(str(part) for part in error["loc"]) or "(document)"
        if error["type"] == "extra_forbidden":
            message = "unknown field (the document has no such field)"
        else:
            message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{path}: {message}")
    return "; ".join(problems)


def parse_config(document: object, *, stored: bool = False) -> TenantConfig:
    """The validated document, or InvalidConfig naming each offending path (LiteralSecret
    when a literal secret is among them). ``stored``: a document read back from the store,
    which the literal-secret checks of args and url (newer than some documents) do not refuse."""
    if not isinstance(document, Mapping):
        raise InvalidConfig("the configuration document must be a JSON object")
    try:
        return TenantConfig.model_validate(dict(document), context={"stored": stored})
    except ValidationError as exc:
        literal = any(e["type"] == secrets.LITERAL_SECRET for e in exc.errors())
        raise (LiteralSecret if literal else InvalidConfig)(_describe(exc)) from None


def load_config_file(path: Path | str) -> TenantConfig:
    """A document from a JSON file (KEEL_EXTERNAL_CONFIG, `tenants config set`)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfig(f"{path}: cannot read the file ({exc.strerror})") from None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidConfig(f"{path}: not JSON ({exc})") from None
    try:
        return parse_config(document)
    except InvalidConfig as exc:
        raise type(exc)(f"{path}: {exc.message}") from None


def load_boot_config(path: Path | None) -> TenantConfig | None:
    """The runtime's boot document, from the file KEEL_EXTERNAL_CONFIG names (the setting
    `external_config`; None: unset)."""
    return load_config_file(path) if path is not None else None


def resolve(
    references: Mapping[str, str], environ: Mapping[str, str], where: str
) -> dict[str, str]:
    """The values the references name, read from ``environ`` when a provider starts;
    InvalidConfig lists every one that is not set (by its variable, never a value)."""
    values: dict[str, str] = {}
    missing: list[str] = []
    for key, text in references.items():
        ref = parse_reference(text)
        if ref is None:
            raise InvalidConfig(f"{where}.{key}: {_NOT_A_REFERENCE}")
        value = environ.get(ref.variable)
        if value is None:
            missing.append(f"{where}.{key} ({ref.text}: set {ref.variable})")
        else:
            values[key] = value
    if missing:
        raise InvalidConfig("declared variables are not set: " + ", ".join(missing))
    return values


def resolved_args(spec: ProviderSpec, environ: Mapping[str, str], where: str) -> list[str]:
    """A stdio provider's arguments as it starts with them: each reference resolved."""
    return secrets.resolve_args(spec.args, lambda refs: resolve(refs, environ, where), "args")


def resolved_url(spec: ProviderSpec, environ: Mapping[str, str], where: str) -> str:
    """An http provider's URL as it is called: each query reference resolved."""
    assert spec.url is not None
    return secrets.resolve_url(spec.url, lambda refs: resolve(refs, environ, where), "url")


def minimal_env(
    declared: Mapping[str, str], environ: Mapping[str, str], where: str = "env"
) -> dict[str, str]:
    """The whole environment of a stdio provider: the allow-list (MINIMAL_ENV, those set)
    plus the variables the provider declares, resolved; nothing else of the runtime's."""
    env = {name: environ[name] for name in MINIMAL_ENV if name in environ}
    env.update(resolve(declared, environ, where))
    return env


def redact_env(environment: Mapping[str, str], declared: Mapping[str, str]) -> dict[str, str]:
    """The audit copy of a provider's environment: allow-listed values as they are, each
    declared variable as its reference, anything else REDACTED."""
    copy: dict[str, str] = {}
    for name, value in environment.items():
        if name in declared:
            copy[name] = declared[name]
        elif name in MINIMAL_ENV:
            copy[name] = value
        else:
            copy[name] = REDACTED
    return copy


def redacted(document: TenantConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a document safe to show (API, CLI, audit): every env and headers value is
    its reference as written, or REDACTED if it is not a reference; in args and url every
    secret-shaped literal is REDACTED (keel_stream.tenancy.secrets); nothing is resolved."""
    source = document.document() if isinstance(document, TenantConfig) else document
    return secrets.redacted_document(source)
