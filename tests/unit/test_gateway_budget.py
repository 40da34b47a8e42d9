"""Provider budgets as rlimits: the mapping, the refusal above the runtime's hard limits."""

from __future__ import annotations

import resource

import pytest

from keel_stream.gateway.budget import check, limits_of, wrap_command
from keel_stream.gateway.config import Budget, parse_config
from keel_stream.gateway.config_errors import InvalidConfig
from keel_stream.gateway.errors import BudgetRefused


def test_a_budget_becomes_rlimits_in_their_own_units() -> None:
    budget = Budget.model_validate(
        {"cpuSeconds": 5, "addressSpaceMb": 512, "openFiles": 64, "processes": 32}
    )
    limits = {limit.field: (limit.resource, limit.value) for limit in limits_of(budget)}
    assert limits == {
        "cpuSeconds": (resource.RLIMIT_CPU, 5),
        "addressSpaceMb": (resource.RLIMIT_AS, 512 * 1024 * 1024),
        "openFiles": (resource.RLIMIT_NOFILE, 64),
        "processes": (resource.RLIMIT_NPROC, 32),
    }
    assert limits_of(None) == []
    assert wrap_command(["prog", "a"], []) == ["prog", "a"]
    assert wrap_command(["prog", "a"], limits_of(budget))[-2:] == ["prog", "a"]


def test_a_budget_above_the_runtimes_hard_limit_is_refused() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard != resource.RLIM_INFINITY
    check(
        limits_of(Budget.model_validate({"openFiles": hard}))
    )  # exactly the hard limit can be granted
    with pytest.raises(BudgetRefused) as refused:
        check(limits_of(Budget.model_validate({"openFiles": hard + 1})))
    assert refused.value.code == "backend_budget_refused"
    assert refused.value.data == {
        "refused": [{"limit": "openFiles", "requested": hard + 1, "hardLimit": hard}]
    }


def test_an_http_provider_takes_no_budget() -> None:
    document = {
        "external": {
            "tools": {"t": {"transport": "http", "url": "http://x", "budget": {"openFiles": 8}}}
        }
    }
    with pytest.raises(InvalidConfig, match="takes no budget"):
        parse_config(document)
    with pytest.raises(InvalidConfig, match=r"budget\.openFiles"):
        parse_config({"external": {"backends": {"b": {
            "transport": "stdio", "command": "x", "budget": {"openFiles": 0}
        }}}})  # fmt: skip
