"""Progress of long local stages: a bar on a terminal, plain log lines otherwise.

Cron mail and a Prefect worker's log want a few timestamped lines, not carriage returns;
a person at a terminal wants a bar.  Both come from one call::

    for future in track(futures, "features: shard blocks"):
        ...
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("foreshock.progress")


def _bar_wanted() -> bool:
    return sys.stderr.isatty() and logging.getLogger("foreshock").getEffectiveLevel() <= logging.INFO


def track(items: Sequence[T], description: str) -> Iterator[T]:
    """Yield ``items``; show a bar on a terminal, else log about every tenth step."""
    total = len(items)
    if total == 0:
        return
    if _bar_wanted():
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            bar = progress.add_task(description, total=total)
            for item in items:
                yield item
                progress.advance(bar)
        log.info("%s: %d/%d done", description, total, total)
        return
    every = max(1, total // 10)
    for done, item in enumerate(items, start=1):
        yield item
        if done % every == 0 or done == total:
            log.info("%s: %d/%d done", description, done, total)
