"""`keel-stream dev --kafka apache`: a durable Apache Kafka under the data directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from keel_stream.kafka.apache_resolve import unavailable


def _dev_once(data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEEL_DATA_DIR": str(data_dir)}
    for name in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP"):
        env.pop(name, None)
    command = [sys.executable, "-m", "keel_stream", "dev", "--kafka", "apache", "--once"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _servers_on(data_dir: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"kafka.Kafka" in cmdline and str(data_dir).encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_dev_runs_a_durable_apache_kafka_that_keeps_its_topics(tmp_path: Path) -> None:
    data_dir = tmp_path / "keel"
    first = _dev_once(data_dir)
    reason = unavailable()
    if reason is not None:  # no Java or Maven here: dev says so, and starts nothing
        assert first.returncode != 0
        assert "broker_unavailable" in first.stderr, first.stderr
        return
    assert first.returncode == 0, first.stderr
    assert "kafka: 127.0.0.1:" in first.stdout
    assert "(topics: 3 created)" in first.stdout, first.stdout
    cluster = re.search(r"^broker: cluster ([A-Za-z0-9_-]+)", first.stdout, re.M)
    assert cluster is not None, first.stdout
    second = _dev_once(data_dir)
    assert second.returncode == 0, second.stderr
    assert "(topics: 0 created)" in second.stdout, second.stdout  # the data survived
    assert f"broker: cluster {cluster.group(1)}" in second.stdout
    assert "offsets reset" not in second.stdout.split("broker: ", 1)[1]
    assert _servers_on(data_dir) == []
