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


# Errors that mean "bad usage or input" (exit 2, one line). KeyError and IndexError are
# LookupErrors too, but from our own code they are bugs: they stay failures (exit 1).
USER_ERRORS = (UserError, FileNotFoundError, NotADirectoryError, ValueError, LookupError)
BUG_ERRORS = (KeyError, IndexError)


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is bad usage or input, reported in one line (exit 2)."""
    return isinstance(exc, USER_ERRORS) and not isinstance(exc, BUG_ERRORS)


def user_error_names() -> set[str]:
    """The class names of every user error type defined so far (how Prefect's state
    messages name an exception: ``... encountered an exception UserError: ...``)."""
    names: set[str] = set()
    pending = list(USER_ERRORS)
    while pending:
        kind = pending.pop()
        if kind.__name__ in names or issubclass(kind, BUG_ERRORS):
            continue
        names.add(kind.__name__)
        pending += kind.__subclasses__()
    return names
