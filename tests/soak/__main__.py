"""``python -m tests.soak [--profile ci|long] [--workdir DIR]``: one soak, its summary table, exit 1 on failure.

Sizes and the seed come from the profile and ``TURNSTILE_SOAK_*`` (tests/soak/config.py); ``make test-soak``
runs the ``long`` profile.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from tests.soak.config import PROFILES, SoakConfig
from tests.soak.driver import run_soak
from tests.soak.oracle import summary_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="long")
    parser.add_argument("--workdir", type=Path, help="keep the nats store, database and service log here")
    args = parser.parse_args(argv)
    config = SoakConfig.from_env(args.profile)
    print(f"soak: {config.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="turnstile-soak-") as tmp:
        workdir = args.workdir or Path(tmp)
        record, report = asyncio.run(run_soak(config, workdir))
    print(summary_table(record, report))
    if not report.passed:
        print(f"FAILED clauses {report.failed_clauses()}; rerun with TURNSTILE_SOAK_SEED={config.seed}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
