"""Errors a user can act on, and the exit codes the command line maps them to.

Every stage raises :class:`UserError` (or a subclass) for bad usage or input it can
explain in one line — a missing file, an empty lake, no champion yet — and the CLI prints
that line and exits 2 without a traceback. Anything else is a failure of the run (exit 1).
A run that did its job but left part of its input behind (ingest rejected some files)
exits 3, so cron and the scheduler can tell "partly done" from "failed".

| code | meaning |
|---|---|
| 0 | ok |
| 1 | failure (traceback logged) |
| 2 | bad usage or input (one line) |
| 3 | partial: ingest rejected some files; `status`: stale is 1, broken is 2 |
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3


class UserError(Exception):
    """Bad usage or input, explained in one line (exit 2)."""

    exit_code = EXIT_USAGE


class MissingInputError(UserError):
    """A stage's input does not exist yet; the message says which command makes it."""


def missing(what: str, where: object, run: str) -> MissingInputError:
    """``no feature snapshots under data/features: run `foreshock features` first``."""
    return MissingInputError(f"{what} under {where}: run `foreshock {run}` first")
