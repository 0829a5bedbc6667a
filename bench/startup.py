"""Phase ``startup``: how long a ``turnstile`` client command takes to start, beside a bare client.

Every ``turnstile`` command (``--help``, ``sessions``, ``send``, ``tail``, …) first imports
``consumers.cli``. Timed: ``python -m consumers.cli --version`` (the CLI's whole start-up: imports,
settings, typer, one line printed) against ``python -c "import nats, typer"`` — what any typer CLI
on nats-py imports before it does anything, so the ratio is what turnstile adds. Each is run
``runs`` times alternately, wall time from the process start to its exit, median reported. The
service's own start (``restart to ready``) is measured by the ``turns20`` phase.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.common import ROOT

COMMANDS = {
    "turnstile_cli": ["-m", "consumers.cli", "--version"],
    "client_floor": ["-c", "import nats, typer"],
}


def _wall_s(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - t0


async def cli_startup(runs: int) -> dict[str, Any]:
    """Median wall seconds of each command over ``runs`` alternated runs, and turnstile's ratio."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        for name, args in COMMANDS.items():
            times[name].append(await asyncio.to_thread(_wall_s, args))
    medians = {f"{name}_s": statistics.median(ts) for name, ts in times.items()}
    return {
        "runs": runs,
        **medians,
        "samples_s": times,
        "ratio": medians["turnstile_cli_s"] / medians["client_floor_s"],
    }


def summary(row: dict[str, Any]) -> str:
    if "ratio" not in row:
        return f"error: {(row.get('error') or 'no data').splitlines()[0][:150]}"
    return (
        f"`turnstile --version` {row['turnstile_cli_s'] * 1000:.0f} ms vs `import nats, typer`"
        f" {row['client_floor_s'] * 1000:.0f} ms ({row['ratio']:.2f}×; median of {row['runs']})"
    )
