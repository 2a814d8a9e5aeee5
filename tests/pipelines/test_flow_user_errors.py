"""Bad input found inside a flow run is one line on stderr, as it is outside one."""

from __future__ import annotations

from foreshock.errors import EXIT_USAGE
from foreshock.pipelines.cli import main


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


def test_with_verbose_the_engine_lines_are_kept(tmp_path, prefect_server, capfd):
    argv = ["-v", "--data-dir", str(tmp_path / "d"), "pull", "--url", "http://127.0.0.1:9"]
    argv += ["--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z"]
    capfd.readouterr()
    assert main(argv) == EXIT_USAGE
    assert "Traceback" in capfd.readouterr().err
