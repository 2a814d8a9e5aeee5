"""Which stage failures the served deployments retry: I/O that may pass, not bad input."""

import errno

import pytest
from prefect.states import Completed, Failed

from foreshock.pipelines.runtime import retry_on_io_error


def _failed(exc: BaseException):
    return Failed(data=exc, message=str(exc))


@pytest.mark.parametrize(
    "exc",
    [OSError(errno.ENOSPC, "No space left on device"), ConnectionResetError("peer reset"), TimeoutError("nfs")],
)
def test_transient_io_errors_are_retried(exc):
    assert retry_on_io_error(None, None, _failed(exc)) is True


@pytest.mark.parametrize(
    "exc",
    [
        FileNotFoundError(errno.ENOENT, "No such file", "data/lake"),
        PermissionError(errno.EACCES, "Permission denied", "data/outbox"),
        ValueError("row 3: not a valid id"),
        KeyError("node"),
    ],
)
def test_bad_input_and_missing_paths_fail_at_once(exc):
    assert retry_on_io_error(None, None, _failed(exc)) is False


def test_a_completed_state_is_not_retried():
    assert retry_on_io_error(None, None, Completed(data=1)) is False
