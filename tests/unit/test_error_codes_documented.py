"""docs/errors.md lists every code the platform can return, with the status and flag it has.

The codes are collected from the code itself: the error tree (every class's code, the kernel's
payload rules), the API (its own error classes, request-validation and HTTP-layer codes) and the
CLI (the codes it prints for problems that are not KeelErrors).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import keel_stream.api.app  # noqa: F401 - every router, so every error class is loaded
from keel_stream import errors
from keel_stream.api.errors import HTTP_ERROR_CODES, REQUEST_ERROR_CODES, status_of

ROOT: Final = Path(__file__).resolve().parents[2]
DOC: Final = ROOT / "docs" / "errors.md"
_ROW: Final = re.compile(r"^\|\s*`([a-z_]+)`\s*\|([^|]*)\|([^|]*)\|")
_NOT_SENT: Final = frozenset({errors.KeelError, errors.InvalidPayload, errors.ConfigurationError})
"""The roots are never raised themselves; an InvalidPayload carries its rule's code."""


def _error_classes() -> set[type[errors.KeelError]]:
    # keel_stream.api.errors is imported above, so the API's own classes are subclasses too.
    found: set[type[errors.KeelError]] = set()
    todo = [errors.KeelError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found - _NOT_SENT


def _cli_codes() -> set[str]:
    """The codes of the failures only a command reports (configuration: the CLI's exit 2)."""
    return {cls.code for cls in _error_classes() if issubclass(cls, errors.ConfigurationError)}


def _documented() -> dict[str, tuple[str, str]]:
    """code -> (HTTP column, retriable column) of every table row in docs/errors.md."""
    rows: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            code, http, retriable = match.groups()
            assert code not in rows, f"{code} is documented twice"
            rows[code] = (http.strip(), retriable.strip())
    return rows


def test_the_collection_finds_each_source() -> None:
    codes = {cls.code for cls in _error_classes()}
    assert {"session_not_found", "unauthorized", "no_running_attempt"} <= codes
    assert "invalid_payload" not in codes, "an InvalidPayload answers with its rule's code"
    assert {"missing_database_url", "invalid_setting", "port_in_use"} <= _cli_codes()
    assert "invalid_request" in REQUEST_ERROR_CODES
    assert {"not_found", "method_not_allowed", "http_error"} <= HTTP_ERROR_CODES


def test_every_code_is_documented() -> None:
    codes = (
        {cls.code for cls in _error_classes()}
        | {rule.value for rule in errors.PayloadRule}
        | REQUEST_ERROR_CODES
        | HTTP_ERROR_CODES
        | _cli_codes()
    )
    missing = sorted(codes - set(_documented()))
    assert missing == [], f"docs/errors.md does not list {missing}"


def test_every_documented_code_exists() -> None:
    codes = (
        {cls.code for cls in _error_classes()}
        | {rule.value for rule in errors.PayloadRule}
        | REQUEST_ERROR_CODES
        | HTTP_ERROR_CODES
        | _cli_codes()
    )
    stale = sorted(set(_documented()) - codes)
    assert stale == [], f"docs/errors.md lists codes nothing returns: {stale}"


def test_the_documented_status_and_retriable_flag_are_true() -> None:
    documented = _documented()
    for cls in _error_classes():
        http, retriable = documented[cls.code]
        if http != "—":  # the CLI-only errors (migrations) never reach the API
            assert http.split()[0] == str(status_of(cls)), cls.code
        assert retriable == ("yes" if cls.retriable else "no"), cls.code
    for rule in errors.PayloadRule:
        assert documented[rule.value] == ("400", "no"), rule.value


def test_only_migration_errors_and_cli_codes_have_no_http_status() -> None:
    without_status = {code for code, (http, _) in _documented().items() if http == "—"}
    assert without_status == _cli_codes() | {
        errors.MigrationFailed.code,
        errors.MigrationDrift.code,
        errors.TopicMissing.code,
    }
