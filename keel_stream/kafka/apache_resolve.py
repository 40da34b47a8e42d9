"""Apache Kafka's server jars, resolved from Maven Central into a cache reused between runs.

The version is pinned in apache_kafka/pom.xml (shipped beside this module). Resolution runs
`mvn dependency:copy-dependencies` into <cache>/kafka-<version>/lib and writes a marker file only
after a complete download, so an interrupted download is done again. The cache is
$XDG_CACHE_HOME/keel-stream (else ~/.cache/keel-stream); Maven's own repository (~/.m2) is
reused as well. Needs Java >= 17 and `mvn` on PATH (JAVA_HOME, when set, chooses the Java).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "LOG4J_CONFIG",
    "MIN_JAVA",
    "POM",
    "ResolveError",
    "cache_root",
    "find_java",
    "is_cached",
    "java_major",
    "lib_dir",
    "parse_java_major",
    "pinned_version",
    "require_java",
    "resolve",
    "unavailable",
]

RESOURCES = Path(__file__).resolve().parent / "apache_kafka"
POM = RESOURCES / "pom.xml"
LOG4J_CONFIG = RESOURCES / "log4j2.properties"
MIN_JAVA = 17
_MARKER = "complete"


class ResolveError(RuntimeError):
    """Apache Kafka cannot be had here (no Java, no Maven, or Maven failed); says why."""


def pinned_version(pom: Path = POM) -> str:
    """The Kafka version the pom pins (its kafka.version property)."""
    found = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", pom.read_text())
    if found is None:
        raise ResolveError(f"{pom} pins no kafka.version")
    return found.group(1)


def cache_root() -> Path:
    """$XDG_CACHE_HOME/keel-stream, else ~/.cache/keel-stream."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "keel-stream"


def lib_dir(version: str, cache: Path | None = None) -> Path:
    """Where the jars of one Kafka version live (complete only once marked)."""
    return (cache or cache_root()) / f"kafka-{version}" / "lib"


def is_cached(version: str | None = None, cache: Path | None = None) -> bool:
    """Whether the jars of `version` were downloaded completely (resolve() returns at once)."""
    lib = lib_dir(version or pinned_version(), cache)
    return (lib.parent / _MARKER).is_file() and lib.is_dir()


def unavailable(version: str | None = None, cache: Path | None = None) -> str | None:
    """Why Apache Kafka cannot run here (no Java >= 17; no Maven and nothing cached), or None."""
    try:
        require_java()
    except ResolveError as exc:
        return str(exc)
    if not is_cached(version, cache) and shutil.which("mvn") is None:
        return "no Maven: mvn is not on PATH (and the jars are not cached yet)"
    return None


def parse_java_major(text: str) -> int | None:
    """The major version from `java -version` output ("17.0.15" -> 17, "1.8.0_392" -> 8)."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if found is None:
        return None
    major = int(found.group(1))
    if major == 1 and found.group(2) is not None:
        return int(found.group(2))
    return major


def find_java() -> str | None:
    """$JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_major(java: str) -> int | None:
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_major(result.stderr + result.stdout)


def require_java() -> str:
    """The java executable to run Kafka with; ResolveError when none or older than 17."""
    java = find_java()
    if java is None:
        raise ResolveError("no Java: neither $JAVA_HOME/bin/java nor java on PATH")
    major = java_major(java)
    if major is None or major < MIN_JAVA:
        raise ResolveError(f"{java} is Java {major}; Apache Kafka 4 needs Java >= {MIN_JAVA}")
    return java


def _require_maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ResolveError("no Maven: mvn is not on PATH")
    return mvn


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One resolver at a time per version (another process may be downloading)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(mvn: str, version: str, home: Path, timeout_s: float) -> None:
    partial = home / "lib.partial"
    shutil.rmtree(partial, ignore_errors=True)
    pom = home / "pom.xml"  # a copy: the installed package may be read-only
    shutil.copyfile(POM, pom)
    command = [
        mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
        f"-Dkafka.version={version}", f"-DoutputDirectory={partial}", "-DincludeScope=runtime",
    ]  # fmt: skip
    try:
        result = subprocess.run(
            command, cwd=home, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ResolveError(f"mvn did not finish in {timeout_s:.0f} s") from exc
    if result.returncode != 0 or not any(partial.glob("kafka_2.13-*.jar")):
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise ResolveError(f"mvn failed to resolve Apache Kafka {version}:\n{tail}")
    lib = home / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    partial.rename(lib)


def resolve(version: str | None = None, cache: Path | None = None, timeout_s: float = 900) -> Path:
    """The lib directory holding every jar of Apache Kafka `version` (the pinned one if None).

    Downloads through Maven on first use; later calls return the cached directory at once.
    Raises ResolveError (saying why) when a download is needed and Java >= 17 or Maven is
    missing, or Maven fails.
    """
    version = version or pinned_version()
    lib = lib_dir(version, cache)
    home = lib.parent
    if is_cached(version, cache):
        return lib
    require_java()
    mvn = _require_maven()
    with _locked(home):
        if not is_cached(version, cache):
            (home / _MARKER).unlink(missing_ok=True)
            _download(mvn, version, home, timeout_s)
            jars = sorted(p.name for p in lib.glob("*.jar"))
            (home / _MARKER).write_text("\n".join(jars) + "\n")
    return lib
