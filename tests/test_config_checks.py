"""Configuration mistakes an operator makes are refused in one line, naming the fix."""

from __future__ import annotations

import typing

import pytest

from foreshock.config import load_config
from foreshock.config_schema import ConfigError, section_models
from foreshock.errors import EXIT_USAGE
from foreshock.pipelines.cli import main


@pytest.fixture
def clean_env(monkeypatch):
    for name in [n for n in __import__("os").environ if n.startswith("FORESHOCK_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_a_misspelled_section_in_an_environment_override_is_an_error(clean_env, tmp_path):
    clean_env.setenv("FORESHOCK_POLCY_ENTER_RISK", "0.6")
    with pytest.raises(ConfigError, match=r"FORESHOCK_POLCY_ENTER_RISK: no configuration section 'polcy'") as err:
        load_config(data_dir=tmp_path)
    assert "did you mean FORESHOCK_POLICY_ENTER_RISK?" in str(err.value)


def test_the_data_directory_variable_is_not_an_override(clean_env, tmp_path):
    clean_env.setenv("FORESHOCK_DATA_DIR", str(tmp_path / "lake-here"))
    assert load_config().data_dir == (tmp_path / "lake-here").resolve()


def test_a_misspelled_section_exits_2_in_one_line(clean_env, tmp_path, capsys):
    clean_env.setenv("FORESHOCK_NOTIFI_URLS", '["json://127.0.0.1/x"]')
    assert main(["--data-dir", str(tmp_path), "lake"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "FORESHOCK_NOTIFI_URLS" in err and "FORESHOCK_NOTIFY_URLS" in err
    assert "Traceback" not in err


def test_list_items_are_type_checked(clean_env, tmp_path):
    clean_env.setenv("FORESHOCK_NOTIFY_URLS", '["x", 3]')
    with pytest.raises(
        ConfigError, match=r"FORESHOCK_NOTIFY_URLS: \[notify\] urls\[1\]: Input should be a valid string"
    ):
        load_config(data_dir=tmp_path)
    clean_env.setenv("FORESHOCK_NOTIFY_URLS", '["json://127.0.0.1/a", "json://127.0.0.1/b"]')
    assert load_config(data_dir=tmp_path).section("notify")["urls"] == ["json://127.0.0.1/a", "json://127.0.0.1/b"]
    site = tmp_path / "site.toml"
    site.write_text('[reliability]\nages = ["1y?"]\n')
    with pytest.raises(ConfigError, match=r"site.toml: \[reliability\] ages\[0\]"):
        load_config(site, data_dir=tmp_path)


def test_every_list_key_says_what_its_items_are():
    """A list whose items are not typed takes anything (``["x", 3]``)."""
    from importlib import resources

    from foreshock.config import DEFAULT_CONFIG_NAME

    models = section_models(resources.files("foreshock").joinpath(DEFAULT_CONFIG_NAME).read_text())
    untyped = [
        f"[{section}] {key}"
        for section, model in models.items()
        for key, field in model.model_fields.items()
        if typing.get_origin(field.annotation) is list and typing.get_args(field.annotation) in ((), (typing.Any,))
    ]
    assert not untyped


def test_config_naming_a_directory_exits_2_without_a_traceback(clean_env, tmp_path, capsys):
    assert main(["--config", str(tmp_path), "--data-dir", str(tmp_path / "d"), "lake"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "is a directory, not a configuration file" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
