"""A three-broker Apache Kafka KRaft cluster with SASL/SCRAM, for the cluster tests.

The brokers are keel_stream.kafka.apache_cluster's (the chaos benchmark starts the same), in a
temporary directory removed after the last node's process group was killed. Java and Maven are
required: without them the fixture fails with the reason, it does not fall back to one broker.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from keel_stream.kafka.apache_cluster import ApacheKafkaCluster
from keel_stream.kafka.apache_resolve import ResolveError

__all__ = ["kafka_cluster"]


@contextlib.contextmanager
def kafka_cluster() -> Iterator[ApacheKafkaCluster]:
    """Three started brokers (combined with the controllers), stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix="keel-kcluster-"))
    cluster = ApacheKafkaCluster(root)
    started = time.monotonic()
    try:
        cluster.start()
    except ResolveError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"Apache Kafka {cluster.version} is not available here: {exc}") from exc
    print(
        f"apache-kafka {cluster.version} (maven), 3 KRaft nodes at {cluster.bootstrap}, "
        f"SASL_PLAINTEXT {cluster.mechanism}, started in {time.monotonic() - started:.1f} s"
    )
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
