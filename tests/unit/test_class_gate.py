"""The commit-class gate lives once, in the kernel: the store's SQL checks what it is told."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from keel_stream.errors import KeelError
from keel_stream.kernel.commits import SessionState, check_class_gate, class_gate, prepare
from keel_stream.kernel.types import CommitRequest, LeaseToken
from keel_stream.kernel.vocabulary import CommitClass

_ONE_OF_EACH = {
    CommitClass.OWNER: ("run.finished", {"status": "done"}, LeaseToken(owner="w", epoch=1)),
    CommitClass.EDGE: ("user.message", {"text": "hi"}, None),
    CommitClass.EXTERNAL: ("external.event", {"backend": "b", "externalRef": "r"}, None),
}


def _newest_keel_commit() -> str:
    migrations = sorted(
        (m for m in files("keel_stream.store.sql.migrations").iterdir() if m.name.endswith(".sql")),
        key=lambda m: m.name,
    )
    defining = [m for m in migrations if "FUNCTION keel_commit(" in m.read_text()]
    return defining[-1].read_text()


def test_the_commit_function_names_no_commit_class() -> None:
    """keel_commit checks the session states the kernel admits; which class admits which state
    is decided in keel_stream.kernel.commits alone."""
    code = "\n".join(line.split("--")[0] for line in _newest_keel_commit().splitlines())
    named = re.findall(r"owner-scoped|edge-scoped|external-scoped|p_classes", code)
    assert named == [], f"the SQL gate names commit classes: {sorted(set(named))}"


@pytest.mark.parametrize("commit_class", list(CommitClass))
@pytest.mark.parametrize("state", list(SessionState))
def test_the_gate_the_store_is_given_is_the_kernels_check(
    commit_class: CommitClass, state: SessionState
) -> None:
    kind, payload, lease = _ONE_OF_EACH[commit_class]
    key = "k1" if commit_class is not CommitClass.OWNER else None
    commit = prepare(
        CommitRequest(
            tenant_id="acme", session_id="s1", kind=kind, payload=payload, lease=lease, key=key
        )
    )
    gate = class_gate(commit_class)
    try:
        fenced = check_class_gate(commit, state)
    except KeelError:
        assert state not in gate.admits
    else:
        assert state in gate.admits
        assert fenced == gate.fenced
