#!/usr/bin/env bash
# Refresh the console's screenshots in docs/console/: the browser tests save one of each page
# (login, sessions, session, ops) when KEEL_CONSOLE_SCREENSHOTS names a directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
KEEL_CONSOLE_SCREENSHOTS="$PWD/docs/console" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/integration/test_console_browser.py
ls -l docs/console/*.png
