"""Bad input found inside a flow run is one line on stderr, as it is outside one."""

from __future__ import annotations

import logging

from foreshock.errors import EXIT_USAGE, UserError
from foreshock.pipelines.cli import main
from foreshock.pipelines.runtime import RUN_LOGGERS


def _engine_record() -> logging.LogRecord:
    """What Prefect's engine logs for a run that raised a user error (with its traceback)."""
    error = UserError("pull: start is after end")
    return logging.LogRecord(
        RUN_LOGGERS[0],
        logging.ERROR,
        __file__,
        1,
        "Encountered an exception: UserError:",
        None,
        (UserError, error, None),
    )


def _engine_line_kept() -> bool:
    return all(f.filter(_engine_record()) for f in logging.getLogger(RUN_LOGGERS[0]).filters)


def test_a_user_error_inside_a_flow_prints_one_line_without_prefects_traceback(tmp_path, prefect_server, capfd):
    argv = ["--data-dir", str(tmp_path / "d"), "pull", "--url", "http://127.0.0.1:9"]
    argv += ["--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z"]
    capfd.readouterr()
    assert main(argv) == EXIT_USAGE
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert lines == [lines[0]] and lines[0].endswith(
        "ERROR foreshock pull: pull: start 2026-01-02T00:00:00+00:00 is after end 2026-01-01T00:00:00+00:00"
    )
    assert not _engine_line_kept()


def test_with_verbose_the_engine_lines_are_kept(tmp_path, prefect_server, capfd):
    argv = ["-v", "--data-dir", str(tmp_path / "d"), "pull", "--url", "http://127.0.0.1:9"]
    argv += ["--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z"]
    capfd.readouterr()
    assert main(argv) == EXIT_USAGE
    err = capfd.readouterr().err
    assert " DEBUG foreshock" in err and err.rstrip().endswith("is after end 2026-01-01T00:00:00+00:00")
    # The engine's own lines (its traceback) pass the filter.  Whether they reach this test's
    # stderr depends on the handlers earlier tests of the process gave Prefect's loggers, so
    # the filter's decision is what is checked.
    assert _engine_line_kept()
