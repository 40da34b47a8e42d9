"""The example plugin packages (examples/), installed into the running venv for the tests that
need them (an editable install, no dependencies), and put to use in this process."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from keel_stream.plugins import PluginCatalog, load_at_start, plugin_catalog, stop_using_plugins

ROOT: Final = Path(__file__).resolve().parents[2]
EXAMPLES: Final = {
    "keel-plugin-example": ROOT / "examples" / "keel-plugin-example",
    "keel-plugin-broken": ROOT / "examples" / "keel-plugin-broken",
}


def _installed(name: str, source: Path) -> bool:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    direct = dist.read_text("direct_url.json") or ""
    return source.as_uri() in direct


def install_examples() -> None:
    """pip-install (editable, --no-deps) whichever example is not installed from this tree."""
    missing = [path for name, path in EXAMPLES.items() if not _installed(name, path)]
    if missing:
        args = [arg for path in missing for arg in ("-e", str(path))]
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *args], check=True
        )
    for path in EXAMPLES.values():
        # An editable install's path hook is read at interpreter start: this process needs
        # the sources on its path itself.
        if str(path / "src") not in sys.path:
            sys.path.append(str(path / "src"))
    importlib.invalidate_caches()
    plugin_catalog.cache_clear()


@contextmanager
def plugins_in_use() -> Iterator[PluginCatalog]:
    """The examples installed, loaded and in use (as a worker's start does), then not."""
    install_examples()
    try:
        yield load_at_start(None)  # every installed plugin, as with KEEL_PLUGINS_ENABLED unset
    finally:
        stop_using_plugins()
