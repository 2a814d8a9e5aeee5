"""The command line: every command is listed, and each parses with only its own stage loaded."""

import re
import sys

import pytest

from foreshock.pipelines.cli import COMMANDS, build_parser, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_parses_its_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"foreshock {command}" in capsys.readouterr().out


def test_help_lists_all_commands_without_loading_the_stages(capsys):
    for module in ("foreshock.pipelines.train_flow", "foreshock.pipelines.features_flow"):
        sys.modules.pop(module, None)
    parser = build_parser([])
    listed = parser.format_help()
    assert all(command in listed for command in COMMANDS)
    assert "foreshock.pipelines.train_flow" not in sys.modules


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "foreshock.toml"
    bad.write_text("[features]\nsnapshot_every = 'hourly'\n")
    assert main(["--config", str(bad), "lake"]) == 2
    assert "snapshot_every" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["backtest", "train", "score", "review"])
def test_a_missing_stage_input_is_one_line_and_exit_2(command, tmp_path, capsys):
    """An empty data directory: the user is told what to run, without a traceback."""
    assert main(["--data-dir", str(tmp_path / "data"), command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    # a UTC timestamp and a level for cron mail, then the one line
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ERROR ", err[0])
    assert err[0].endswith(
        f"foreshock {command}: no feature snapshots under {tmp_path / 'data' / 'features'}: run `foreshock features` first"
    )


def test_a_failure_is_exit_1_with_its_traceback(tmp_path, capsys, monkeypatch):
    """A bug or an environment failure is not the user's input: exit 1, traceback kept for the report."""
    from foreshock.pipelines import lake_cmd

    def broken(*_args, **_kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(lake_cmd, "lake_summary", broken)
    assert main(["--data-dir", str(tmp_path / "data"), "lake"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ERROR foreshock lake: disk on fire" in err
