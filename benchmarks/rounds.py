"""Repeated runs for the benchmarks: rounds in turned order, medians, paired ratios.

The machines these run on are shared and noisy: a single run can differ by 10 % or more
from the next.  So each benchmark runs what it compares (this tree, the floor, an older
revision) in rounds, one run of each per round, in an order that turns each round; it
reports each thing's median and each ratio as the median over rounds of the ratio of two
runs of the same round (they shared the machine's load).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def in_rounds(kinds: list[str], run: Callable[[str], dict], repeat: int) -> dict[str, list[dict]]:
    """``run(kind)`` for each kind, ``repeat`` rounds, the order turned by one each round."""
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for number in range(max(repeat, 1)):
        for kind in kinds[number % len(kinds) :] + kinds[: number % len(kinds)]:
            runs[kind].append(run(kind))
    return runs


def typical(results: list[dict], peak: str = "peak_mb") -> dict:
    """One figure for several runs of the same thing: the median wall and CPU seconds (each
    over the runs), the largest peak RSS (key ``peak``), the spread of wall times (``runs``)."""
    walls = [r["seconds"] for r in results]
    return {
        **results[0],
        "seconds": statistics.median(walls),
        "cpu": statistics.median(r["cpu"] for r in results),
        peak: max(r[peak] for r in results),
        "runs": (len(walls), min(walls), max(walls)),
    }


def paired(numerators: list[dict], denominators: list[dict], key: str) -> float:
    """The median over rounds of ``numerator[key] / denominator[key]`` (runs of one round
    ran next to each other: the machine's load is shared by both)."""
    return statistics.median(a[key] / b[key] for a, b in zip(numerators, denominators))


def child_usage(argv: list[str], env: dict | None = None, log: Path | None = None, cwd: Path | None = None) -> dict:
    """Run ``argv`` in a child process to its end: its wall seconds, CPU seconds (user +
    system, the processes it waited for included), peak RSS (MB, its largest process), exit
    code, and its stdout and stderr (empty with ``log``: both went to that file)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        sink = open(log, "w") if log else None  # noqa: SIM115 - closed below, after the child
        started = time.perf_counter()
        try:
            child = subprocess.Popen(
                argv, env=env, cwd=cwd, text=True, stdout=sink or out, stderr=subprocess.STDOUT if sink else err
            )
            # wait4 reaps the child with its own resource usage (the children it waited for
            # included), not that of every child so far as RUSAGE_CHILDREN would
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            if sink:
                sink.close()
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return {
            "seconds": seconds,
            "cpu": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
            "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read(),
            "stderr": err.read(),
        }


def extract_revision(rev: str, into: Path) -> Path:
    """The ``foreshock`` package as of git revision ``rev``, under ``into`` (put ``into`` on
    ``PYTHONPATH`` of a child process to run that revision's code)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "foreshock"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into
