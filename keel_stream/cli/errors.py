"""How a command fails: one line `error [code]: message` on stderr and a non-zero exit status.

Every KeelError ends a command this way (the store and the Kafka seam translate their drivers'
failures into the tree), and so does a setting that does not parse. Exit status 2 means the
configuration is wrong (a missing or invalid setting), 1 anything else. A traceback means a bug.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final, NoReturn

import typer
from typer.core import TyperGroup

from keel_stream.errors import (
    InvalidSetting,
    KeelError,
    MissingDatabaseUrl,
    MissingKafkaBootstrap,
    PortInUse,
)
from keel_stream.settings import process_environ

__all__ = [
    "EXIT_FAILED",
    "EXIT_SETTING",
    "InvalidSetting",
    "KeelGroup",
    "MissingDatabaseUrl",
    "MissingKafkaBootstrap",
    "PortInUse",
    "exit_code_of",
    "fail",
    "reported",
]

EXIT_FAILED: Final = 1
EXIT_SETTING: Final = 2


_SETTING_ERRORS: Final = (InvalidSetting, MissingDatabaseUrl, MissingKafkaBootstrap)


def exit_code_of(error: KeelError) -> int:
    return EXIT_SETTING if isinstance(error, _SETTING_ERRORS) else EXIT_FAILED


def fail(error: KeelError) -> NoReturn:
    """End the command with the error's one line and exit status."""
    typer.echo(f"error [{error.error_code}]: {error.message}", err=True)
    raise typer.Exit(code=exit_code_of(error)) from None


def _environment_variable(exc: typer.BadParameter) -> str | None:
    """The variable a bad value came from, or None when it was given on the command line."""
    param, ctx = exc.param, exc.ctx
    if param is None or ctx is None or param.name is None:
        return None
    source = ctx.get_parameter_source(param.name)
    if source is None or source.name != "ENVIRONMENT":
        return None
    envvar = param.envvar
    return envvar if isinstance(envvar, str) else None


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Turn the failures a user can act on into `fail`; anything else stays a traceback."""
    try:
        yield
    except KeelError as exc:
        fail(exc)
    except typer.BadParameter as exc:
        variable = _environment_variable(exc)
        if variable is None:
            raise  # a bad flag: click's usage message says it best
        fail(InvalidSetting(f"{variable}: {exc.message} (got {process_environ().get(variable)!r})"))


class KeelGroup(TyperGroup):
    """The root command: sub-commands are parsed and run inside `reported`."""

    # ctx is typer's vendored click Context, which typer does not export.
    def invoke(self, ctx: Any) -> Any:
        with reported():
            return super().invoke(ctx)
