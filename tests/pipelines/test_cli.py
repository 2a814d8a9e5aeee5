"""The command line: every command is listed, and each parses with only its own stage loaded."""

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
    for module in ("foreshock.pipelines.registry_flow", "foreshock.pipelines.features_flow"):
        sys.modules.pop(module, None)
    parser = build_parser([])
    listed = parser.format_help()
    assert all(command in listed for command in COMMANDS)
    assert "foreshock.pipelines.registry_flow" not in sys.modules


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "foreshock.toml"
    bad.write_text("[features]\nsnapshot_every = 'hourly'\n")
    assert main(["--config", str(bad), "lake"]) == 2
    assert "snapshot_every" in capsys.readouterr().err
