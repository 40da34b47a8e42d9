"""Secrets in a provider's ``args`` and ``url``: references resolved at start, literals refused.

``env`` and ``headers`` take references only (keel_stream.tenancy.document). ``args`` and ``url``
are mostly not secret, so they take any text, but a secret in them is a reference too:

- an argument that is a reference (``secret:API_KEY``), or ``--flag=<reference>``;
- the value of a URL's query parameter (``?token=secret:TOKEN``), in ``url`` or in an argument
  that is a URL.

A secret-shaped literal is refused (LiteralSecret, ``literal_secret``) so it is never stored:
credentials in a URL (``user:pass@``), a query parameter named like a secret (key, token, secret,
password, auth, signature, ...) with a literal value, a literal value after (or ``=`` of) a flag
named like one, and anything with the shape of a well-known key (``sk-…``, ``ghp_…``,
``AKIA…``, a JWT, ``Bearer …``). Whatever a check would refuse is also what ``redact_args`` and
``redact_url`` hide when a document is shown, so a document stored before these checks shows no
literal either.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import SplitResult, quote, unquote, urlsplit, urlunsplit

from pydantic_core import PydanticCustomError

__all__ = [
    "LITERAL_SECRET",
    "REDACTED",
    "args_problems",
    "checked_args",
    "checked_url",
    "redact_args",
    "redact_url",
    "redacted_document",
    "resolve_args",
    "resolve_url",
    "secret_named",
    "url_problems",
]

REDACTED: Final = "[redacted]"
LITERAL_SECRET: Final = "literal_secret"  # noqa: S105 - an error code, not a secret
"""The validation error type (and the error code) of a secret-shaped literal."""
_REFERENCE: Final = re.compile(r"\$\{[A-Z_][A-Z0-9_]*\}|(?:env|secret):[A-Z_][A-Z0-9_]*")
_SECRET_WORDS: Final = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "sig",
        "signature",
        "bearer",
        "accesskey",
        "secretkey",
        "privatekey",
        "authkey",
        "authtoken",
        "accesstoken",
        "apitoken",
        "refreshtoken",
        "sessiontoken",
        "clientsecret",
    }
)
# A name ending in one of these names something about a secret, not the secret itself
# (--key-file, --token-env, --auth-type, --secret-name, --token-limit).
_ABOUT_A_SECRET: Final = frozenset(
    {"file", "path", "dir", "id", "name", "env", "var", "type", "format", "limit", "length"}
    | {"size", "ttl", "header", "count", "max", "min", "timeout"}
)
_PLAIN_VALUES: Final = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null"})
_KEY_SHAPES: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-…), and the like
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # a JWT
    r"|whsec_[A-Za-z0-9+/=]{16,}|keel_[A-Za-z0-9_-]{20,}"  # Standard Webhooks, keel-stream
    r"|(?i:bearer|basic)\s+\S{8,}"
    r")"
)

Problem = tuple[int, str]
"""An argument's index and why it is a literal secret."""


def _is_reference(value: str) -> bool:
    return _REFERENCE.fullmatch(value) is not None


def secret_named(name: str) -> bool:
    """Whether a flag or parameter name says its value is a secret (api-key, apiKey,
    X-Access-Token, client_secret), and not merely something about one (key-file)."""
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)]
    if not words or words[-1] in _ABOUT_A_SECRET:
        return False
    return "".join(words) in _SECRET_WORDS or any(w in _SECRET_WORDS for w in words)


def _secret_value(value: str) -> bool:
    """A value given to a secret-named flag that could be the secret itself: not empty, not a
    number, a yes/no word or a path."""
    plain = value == "" or value.lower() in _PLAIN_VALUES or value.isdigit()
    return not plain and not value.startswith(("/", "./", "../", "~/"))


def _flag(arg: str) -> str | None:
    return arg.lstrip("-") if arg.startswith("-") and len(arg) > 1 else None


def _query_pairs(query: str) -> list[tuple[str, str]]:
    pairs = []
    for part in query.split("&") if query else ():
        name, _, value = part.partition("=")
        pairs.append((unquote(name), unquote(value)))
    return pairs


def url_problems(url: str) -> list[str]:
    """Why ``url`` holds a literal secret (empty: it does not)."""
    try:
        parts = urlsplit(url)
        has_userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return []
    problems = ["credentials in the URL (user:pass@): use headers"] if has_userinfo else []
    for name, value in _query_pairs(parts.query):
        if _is_reference(value):
            continue
        if (secret_named(name) and _secret_value(value)) or _KEY_SHAPES.search(value):
            problems.append(f"query parameter {name!r} holds a literal value")
    if _KEY_SHAPES.search(unquote(parts.path + parts.fragment)):
        problems.append("the URL holds a well-known key")
    return problems


def _arg_problem(arg: str, previous: str | None) -> str | None:
    if _is_reference(arg):
        return None
    if "://" in arg:
        found = url_problems(arg)
        return found[0] if found else None
    flag, equals, value = arg.partition("=")
    if equals and _flag(flag) is not None:
        if _is_reference(value):
            return None
        if secret_named(flag) and _secret_value(value):
            return f"a literal value for {flag}"
    if _KEY_SHAPES.search(arg):
        return "a well-known key"
    named = previous is not None and "=" not in previous and _flag(previous) is not None
    if named and previous is not None and secret_named(previous) and _flag(arg) is None:
        return f"a literal value after {previous}" if _secret_value(arg) else None
    return None


def args_problems(args: Sequence[str]) -> list[Problem]:
    """Each argument that is a literal secret, with why."""
    problems: list[Problem] = []
    for index, arg in enumerate(args):
        found = _arg_problem(arg, args[index - 1] if index else None)
        if found is not None:
            problems.append((index, found))
    return problems


def redact_url(url: str) -> str:
    """``url`` as it may be shown: credentials, secret-named literal query values and anything
    shaped like a key replaced by REDACTED; references kept as written."""
    try:
        parts = urlsplit(url)
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return REDACTED if _KEY_SHAPES.search(url) else url
    netloc = f"{REDACTED}@{parts.netloc.rpartition('@')[2]}" if userinfo else parts.netloc
    query = _map_query(parts.query, _shown_value)
    path, fragment = (_KEY_SHAPES.sub(REDACTED, part) for part in (parts.path, parts.fragment))
    return urlunsplit(SplitResult(parts.scheme, netloc, path, query, fragment))


def _shown_value(name: str, value: str) -> str | None:
    if _is_reference(value):
        return None
    if (secret_named(name) and _secret_value(value)) or _KEY_SHAPES.search(value):
        return REDACTED
    return None


def _map_query(query: str, change: Callable[[str, str], str | None]) -> str:
    """The query with the values ``change`` replaces (None: kept byte for byte)."""
    parts = []
    for part in query.split("&") if query else ():
        name, equals, value = part.partition("=")
        new = change(unquote(name), unquote(value)) if equals else None
        parts.append(part if new is None else f"{name}={quote(new, safe='[]')}")
    return "&".join(parts)


def redact_args(args: Sequence[str]) -> list[str]:
    """``args`` as they may be shown: each literal secret replaced by REDACTED (a URL keeps
    what is not secret, ``--flag=`` keeps its flag)."""
    shown = list(args)
    for index, _ in args_problems(args):
        arg = args[index]
        flag, equals, _value = arg.partition("=")
        if "://" in arg:
            shown[index] = redact_url(arg)
        elif equals and _flag(flag) is not None:
            shown[index] = f"{flag}={REDACTED}"
        else:
            shown[index] = REDACTED
    return shown


Resolver = Callable[[Mapping[str, str]], dict[str, str]]
"""Reference texts by label -> their values (keel_stream.tenancy.document.resolve, bound)."""


def resolve_url(url: str, resolve: Resolver, where: str) -> str:
    """``url`` with each query value that is a reference replaced by its value."""
    parts = urlsplit(url)
    found = {f"{where}?{n}": v for n, v in _query_pairs(parts.query) if _is_reference(v)}
    if not found:
        return url
    values = resolve(found)
    query = _map_query(
        parts.query, lambda n, v: values[f"{where}?{n}"] if _is_reference(v) else None
    )
    return urlunsplit(parts._replace(query=query))


def resolve_args(args: Sequence[str], resolve: Resolver, where: str) -> list[str]:
    """``args`` with each reference (a whole argument, ``--flag=<reference>``, a URL's query
    value) replaced by its value; InvalidConfig names every one that is not set."""
    found: dict[str, str] = {}
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if _is_reference(arg):
            found[f"{where}[{index}]"] = arg
        elif equals and _flag(flag) is not None and _is_reference(value):
            found[f"{where}[{index}]"] = value
    values = resolve(found) if found else {}
    resolved = []
    for index, arg in enumerate(args):
        secret = values.get(f"{where}[{index}]")
        if secret is not None:
            resolved.append(secret if _is_reference(arg) else f"{arg.partition('=')[0]}={secret}")
        elif "://" in arg:
            resolved.append(resolve_url(arg, resolve, f"{where}[{index}]"))
        else:
            resolved.append(arg)
    return resolved


def _stored(context: object) -> bool:
    """A document read back from the store: it may predate these checks (it is shown redacted)."""
    return isinstance(context, Mapping) and bool(context.get("stored"))


def _refuse(found: str) -> PydanticCustomError:
    return PydanticCustomError(
        LITERAL_SECRET,
        "{found} (a literal secret is refused and never stored: use secret:NAME, env:NAME or "
        "${{NAME}}, or headers for credentials)",
        {"found": found},
    )


def checked_args(args: list[str], context: object) -> list[str]:
    """``args`` as validated: a literal secret among them is refused."""
    problems = [] if _stored(context) else args_problems(args)
    if problems:
        raise _refuse("; ".join(f"args[{i}]: {why}" for i, why in problems))
    return args


def checked_url(url: str | None, context: object) -> str | None:
    """``url`` as validated: a literal secret in it is refused."""
    problems = [] if url is None or _stored(context) else url_problems(url)
    if problems:
        raise _refuse("; ".join(problems))
    return url


def redacted_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """A document as it may be shown (keel_stream.tenancy.document.redacted)."""
    return {key: _redact(value, key) for key, value in document.items()}


def _redact(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        if key in ("env", "headers"):
            return {k: v if _is_reference(v) else REDACTED for k, v in value.items()}
        return {k: _redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "args" and all(isinstance(item, str) for item in value):
            return redact_args(value)
        return [_redact(item, "") for item in value]
    if key == "url" and isinstance(value, str):
        return redact_url(value)
    return value
