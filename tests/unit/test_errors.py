from __future__ import annotations

import importlib
import pkgutil
import re
from functools import cache

import keel_stream
import keel_stream.errors as errors_module
from keel_stream.errors import (
    BrokerUnavailable,
    KeelError,
    ProjectionBehind,
    RateLimited,
    StoreUnavailable,
    TenantBusy,
)


@cache
def _error_classes() -> list[type[KeelError]]:
    """Every subclass of KeelError anywhere in keel_stream (each module imported first)."""
    for module in pkgutil.walk_packages(keel_stream.__path__, "keel_stream."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[KeelError]] = []
    todo = [KeelError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _diagram() -> dict[str, str]:
    """Class name -> the name it is drawn under, from the tree in the package docstring."""
    lines = (errors_module.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "KeelError")
    parents: dict[str, str] = {"KeelError": ""}
    stack: list[tuple[int, str]] = [(lines[start].index("K"), "KeelError")]
    for line in lines[start + 1 :]:
        match = re.match(r"^([ │]*[├└]── )([A-Z]\w*)", line)
        if match is None:
            break
        depth, name = len(match.group(1)), match.group(2)
        while stack[-1][0] >= depth:
            stack.pop()
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def test_every_error_has_its_own_code() -> None:
    codes = [cls.code for cls in _error_classes()]
    assert sorted(c for c in codes if codes.count(c) > 1) == []


def test_the_diagram_names_every_error_class_and_no_other() -> None:
    drawn = set(_diagram())
    classes = {cls.__name__ for cls in _error_classes()}
    assert sorted(classes - drawn) == [], "missing from the diagram in keel_stream/errors"
    assert sorted(drawn - classes) == [], "the diagram names classes that do not exist"


def test_the_diagram_draws_each_class_under_its_base() -> None:
    drawn = _diagram()
    for cls in _error_classes():
        if cls is not KeelError and cls.__name__ in drawn:
            assert drawn[cls.__name__] == cls.__bases__[0].__name__, cls.__name__


def test_every_error_is_imported_from_keel_stream_errors() -> None:
    for cls in _error_classes():
        assert getattr(errors_module, cls.__name__, None) is cls, cls.__name__
        assert cls.__module__.startswith("keel_stream.errors"), cls.__module__


def test_only_transient_errors_are_retriable() -> None:
    # A tenant's rate or concurrency bound passes with time (Retry-After), so it is transient too.
    retriable = {cls.__name__ for cls in _error_classes() if cls.retriable}
    assert retriable == {
        StoreUnavailable.__name__,
        ProjectionBehind.__name__,
        BrokerUnavailable.__name__,
        RateLimited.__name__,
        TenantBusy.__name__,
        "ServerBusy",
        "BackendTimeout",
        "BackendUnavailable",
    }
