"""The pieces `keel-stream dev` keeps its life with: processes by identity, the data directory's
lock, the record of what it started and its sweep, its addresses, and when offsets are reset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from keel_stream.dev.addresses import running_dev, write_addresses
from keel_stream.dev.lock import dev_lock, ensure_not_running
from keel_stream.dev.pids import PIDS_FILE, DevPids, sweep_leftovers
from keel_stream.dev.resume import needs_reset
from keel_stream.errors import DevAlreadyRunning
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.procs import Proc, die_with_parent, wait_gone
from keel_stream.topics.groups import projector_group


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def test_a_process_is_its_pid_and_start_time(sleeper: subprocess.Popen[bytes]) -> None:
    proc = Proc.of(sleeper.pid)
    assert proc is not None
    assert proc.alive()
    reused = Proc(proc.pid, proc.start_ticks + 1)  # what a reused pid looks like
    assert not reused.alive()
    reused.signal(signal.SIGKILL)
    assert proc.alive(), "a pid whose start time differs is never signalled"
    sleeper.kill()
    sleeper.wait()
    assert not proc.alive()
    assert Proc.of(sleeper.pid) is None


def test_a_zombie_is_gone_but_not_yet_reaped() -> None:
    with subprocess.Popen([sys.executable, "-c", "pass"]) as child:
        proc = Proc.of(child.pid)
        assert proc is not None
        assert wait_gone([proc], 10) == []
        assert proc.exists(), "unreaped until its parent waits"
        child.wait()
        assert not proc.exists()


def test_a_child_armed_to_die_with_its_parent_dies_with_it() -> None:
    # The parent is a python process that starts an armed sleeper and then dies by SIGKILL.
    script = (
        "import os, signal, subprocess, sys\n"
        "from keel_stream.procs import die_with_parent\n"
        "child = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent())\n"
        "print(child.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    grandchild = Proc.of(int(result.stdout.split()[0]))
    try:
        assert grandchild is None or wait_gone([grandchild], 10) == []
    finally:
        if grandchild is not None:
            grandchild.signal(signal.SIGKILL)
    assert die_with_parent() is not None, "Linux has a parent-death signal"


def test_the_lock_admits_one_dev_and_names_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "keel"
    ensure_not_running(data_dir)
    assert not data_dir.exists(), "checking creates nothing"
    with dev_lock(data_dir):
        with pytest.raises(DevAlreadyRunning, match=f"pid {os.getpid()}"):
            ensure_not_running(data_dir)
        with pytest.raises(DevAlreadyRunning), dev_lock(data_dir):
            pass
    ensure_not_running(data_dir)
    with dev_lock(data_dir):  # released when the holder leaves
        pass


def test_a_holder_killed_by_sigkill_releases_the_lock(tmp_path: Path) -> None:
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from keel_stream.dev.lock import dev_lock\n"
        "with dev_lock(Path(sys.argv[1])):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=30, check=False)
    ensure_not_running(tmp_path)


def test_the_sweep_stops_what_a_dead_dev_recorded_and_nothing_else(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    pids = DevPids(tmp_path)
    pids.record("projector", sleeper.pid)
    recorded = json.loads((tmp_path / PIDS_FILE).read_text())
    assert set(recorded) == {"dev", "projector"}
    # The record of a dev that is gone, with a broker whose pid was reused meanwhile.
    recorded["dev"] = {"pid": recorded["dev"]["pid"], "start_ticks": 0}
    me = Proc.me()
    recorded["broker"] = {"pid": me.pid, "start_ticks": me.start_ticks + 1}
    (tmp_path / PIDS_FILE).write_text(json.dumps(recorded))
    swept = sweep_leftovers(tmp_path)
    assert swept.stopped == [f"projector (pid {sleeper.pid})"]
    assert swept.left == []
    assert sleeper.wait(10) is not None
    assert not (tmp_path / PIDS_FILE).exists()


def test_addresses_are_believed_only_while_their_dev_runs(tmp_path: Path) -> None:
    assert running_dev(tmp_path) is None
    write_addresses(
        tmp_path, database_url="postgresql://x", kafka_bootstrap="127.0.0.1:1", api_url="http://a"
    )
    assert (tmp_path / "dev.json").stat().st_mode & 0o077 == 0
    found = running_dev(tmp_path)
    assert found is not None
    assert found.database_url == "postgresql://x"
    record = json.loads((tmp_path / "dev.json").read_text())
    record["start_ticks"] += 1  # a dev that died, its pid now someone else's
    (tmp_path / "dev.json").write_text(json.dumps(record))
    assert running_dev(tmp_path) is None
    (tmp_path / "dev.json").write_text("{not json")
    assert running_dev(tmp_path) is None


@pytest.mark.parametrize(
    ("recorded", "current", "created", "reset"),
    [
        ("keel-a", "keel-a", False, False),  # the same broker, the topic kept
        ("keel-a", "keel-b", False, True),  # another incarnation
        (None, "keel-a", False, True),  # never recorded: nothing says the offsets are valid
        ("keel-a", "keel-a", True, True),  # the topic was just created: it is empty
    ],
)
def test_offsets_are_reset_for_another_incarnation(
    recorded: str | None, current: str, created: bool, reset: bool
) -> None:
    assert needs_reset(recorded, current, topic_created=created) is reset


def test_dev_waits_for_the_group_the_projector_joins() -> None:
    from keel_stream.projector.host import HostConfig

    for prefix in ("", "staging."):
        config = HostConfig(database_url="x", kafka=KafkaSettings("y"), topic_prefix=prefix)
        assert projector_group(prefix) == config.group
