"""Which stage failures the served deployments retry: I/O that may pass, not bad input."""

import errno

import pytest
from prefect.states import Completed, Failed

from foreshock.pipelines.runtime import is_io_error, retry_on_io_error


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


def _polars_full_disk_error() -> BaseException:
    """What Polars raises when the disk fills under a Parquet write (``/dev/full``)."""
    import polars as pl

    try:
        pl.DataFrame({"a": range(100_000)}).write_parquet("/dev/full")
    except Exception as exc:  # noqa: BLE001 - the error itself is what is judged
        return exc
    pytest.skip("/dev/full accepted the write")


def test_a_full_disk_behind_a_polars_error_is_retried():
    exc = _polars_full_disk_error()
    assert not isinstance(exc, OSError)  # Polars wraps it: only its text says ENOSPC
    assert retry_on_io_error(None, None, _failed(exc)) is True


def test_a_missing_path_behind_a_library_error_is_not_retried():
    import polars as pl

    wrapped = pl.exceptions.ComputeError("parquet: underlying IO error: No such file or directory (os error 2)")
    assert retry_on_io_error(None, None, _failed(wrapped)) is False
    try:
        raise RuntimeError("merge failed") from OSError(errno.EIO, "Input/output error")
    except RuntimeError as chained:
        assert retry_on_io_error(None, None, _failed(chained)) is True


def test_a_user_error_raised_from_none_while_handling_an_http_error_is_not_io():
    """A bad query (HTTP 400) becomes a UserError ``from None`` inside urllib's HTTPError
    handler, an OSError: the hidden context must not make it look like I/O (retried)."""
    import urllib.error

    from foreshock.errors import UserError

    try:
        try:
            raise urllib.error.HTTPError("http://x", 400, "bad", {}, None)
        except urllib.error.HTTPError:
            raise UserError("Prometheus refused the query") from None
    except UserError as exc:
        error = exc
    assert not is_io_error(error)
