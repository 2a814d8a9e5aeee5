"""Model recipes (models/*.toml): the parameters backtest and train build each model with."""

from __future__ import annotations

import dataclasses

import pytest

from foreshock.config import load_config
from foreshock.models.estimators.bundle import MODEL_CLASSES, model_factories
from foreshock.models.estimators.recipes import RECIPE_FILES, builtin_recipes_dir, load_recipe


def _site(tmp_path, recipes: dict[str, str], extra: str = ""):
    directory = tmp_path / "recipes"
    directory.mkdir()
    for name, text in recipes.items():
        (directory / name).write_text(text)
    site = tmp_path / "foreshock.toml"
    site.write_text(f'[models]\nrecipes = "recipes"\n{extra}')  # relative to the file
    return load_config(site, data_dir=tmp_path / "data")


def test_every_recipe_key_is_an_argument_of_its_model():
    assert sorted(p.name for p in builtin_recipes_dir().glob("*.toml")) == sorted(RECIPE_FILES.values())
    for model in ("gbm", "cox"):
        arguments = {f.name for f in dataclasses.fields(MODEL_CLASSES[model]) if not f.name.endswith("_")}
        assert set(load_recipe(model)) <= arguments, model


def test_models_are_built_from_the_recipes(tmp_path):
    built = {name: make() for name, make in model_factories(load_config(None, data_dir=tmp_path)).items()}
    gbm, cox, baseline = built["gbm"], built["cox"], built["baseline"]
    recipe = load_recipe("gbm")
    assert gbm.num_boost_round == recipe["num_boost_round"] and gbm.lightgbm == recipe["lightgbm"]
    assert cox.penalizer == load_recipe("cox")["penalizer"]
    # the rules: which metrics from rules.toml, the operators' thresholds from [baseline]
    assert baseline.rules["dbe_metrics"] == load_recipe("baseline")["dbe_metrics"]
    assert gbm.rules == baseline.rules and baseline.rules["sbe_increase_per_day"] == 50


def test_a_site_recipe_overrides_key_by_key(tmp_path):
    config = _site(
        tmp_path,
        {
            "cox.toml": "penalizer = 1e-5\n",
            "lightgbm.toml": "num_boost_round = 120\nrules = false\n[lightgbm]\nnum_leaves = 31\n",
            "rules.toml": "growth_quantile = 0.9\n",
        },
        extra="gbm = {seed = 11}\n[baseline]\nsbe_increase_per_day = 80\n",
    )
    built = {name: make() for name, make in model_factories(config).items()}
    gbm, cox, baseline = built["gbm"], built["cox"], built["baseline"]
    assert cox.penalizer == 1e-5 and cox.max_features == load_recipe("cox")["max_features"]
    assert gbm.num_boost_round == 120 and gbm.seed == 11 and gbm.rules is None
    # a table is overridden key by key: the other LightGBM parameters stay
    assert (
        gbm.lightgbm["num_leaves"] == 31
        and gbm.lightgbm["learning_rate"] == load_recipe("gbm")["lightgbm"]["learning_rate"]
    )
    gbm.feature_names_ = []
    params = gbm._params(positive_rows=400)
    assert params["num_leaves"] == 31 and params["seed"] == 11 and params["min_data_in_leaf"] == 20
    assert baseline.rules["growth_quantile"] == 0.9 and baseline.rules["sbe_increase_per_day"] == 80


def test_an_unknown_recipe_key_names_the_file_and_the_closest_key(tmp_path):
    config = _site(tmp_path, {"cox.toml": "penaliser = 1e-5\n"})
    with pytest.raises(ValueError, match=r"cox\.toml: unknown key 'penaliser' \(did you mean 'penalizer'\?\)"):
        model_factories(config)


def test_a_missing_recipe_directory_is_an_error(tmp_path):
    site = tmp_path / "foreshock.toml"
    site.write_text('[models]\nrecipes = "nowhere"\n')
    with pytest.raises(FileNotFoundError, match="nowhere"):
        model_factories(load_config(site, data_dir=tmp_path / "data"))


def test_the_models_tables_of_the_configuration_override_key_by_key(tmp_path):
    """``[models] gbm = {lightgbm = {...}}`` changes the parameters it names and keeps the
    recipe's others (the objective, the learning rate): before, the table replaced them all."""
    site = tmp_path / "foreshock.toml"
    site.write_text(
        "[models]\ngbm = {lightgbm = {num_leaves = 63}, params = {extra_trees = true}}\ncox = {penalizer = 1e-5}\n"
    )
    built = {name: make() for name, make in model_factories(load_config(site, data_dir=tmp_path / "data")).items()}
    recipe = load_recipe("gbm")["lightgbm"]
    assert built["gbm"].lightgbm == {**recipe, "num_leaves": 63}
    assert built["gbm"].params == {"extra_trees": True}  # an argument no recipe sets
    assert built["cox"].penalizer == 1e-5 and built["cox"].max_features == load_recipe("cox")["max_features"]


def test_a_misspelled_key_of_the_models_tables_is_an_error_naming_the_table(tmp_path):
    site = tmp_path / "foreshock.toml"
    site.write_text("[models]\ngbm = {num_boost_rounds = 5}\n")
    with pytest.raises(
        ValueError, match=r"\[models\] gbm: unknown key 'num_boost_rounds' \(did you mean 'num_boost_round'\?\)"
    ):
        model_factories(load_config(site, data_dir=tmp_path / "data"))
