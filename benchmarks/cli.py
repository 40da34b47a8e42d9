"""The command line every benchmark shares: its own flags, and `--smoke`, its smallest size.

`--smoke` checks that a benchmark still runs end to end (tests/integration/
test_benchmarks_smoke.py runs each so, in seconds): its figures mean nothing at that size. Flags
given with it still win over its sizes."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

__all__ = ["arguments"]

SMOKE_HELP = "the smallest size, in seconds: checks the benchmark runs; its figures mean nothing"


def arguments(parser: argparse.ArgumentParser, smoke: Mapping[str, object]) -> argparse.Namespace:
    """The parsed command line; with `--smoke`, `smoke` (dest -> value) as the defaults."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if not args.smoke:
        return args
    unknown = sorted(set(smoke) - set(vars(args)))
    if unknown:
        raise ValueError(f"--smoke sizes flags the benchmark does not have: {unknown}")
    parser.set_defaults(**smoke)
    return parser.parse_args()
