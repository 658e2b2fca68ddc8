"""The one configuration object: defaults < file < profile < environment < explicit overrides."""

from pathlib import Path

import pytest

from deepsummit.core.config import available_profiles, load_settings, nested_overrides
from deepsummit.core.sections import PROJECT_ROOT

CONFIG = """
[settings]
profile = "small"
train.max_epochs = 50
train.batch_size = 128

[profiles.small]
model.hidden_size = 32
train.max_epochs = 3

[profiles.large]
model.hidden_size = 512
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "deepsummit.toml"
    path.write_text(CONFIG)
    for name in ("DEEPSUMMIT_PROFILE", "DEEPSUMMIT_TRAIN__MAX_EPOCHS", "DEEPSUMMIT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return path


def test_profile_overrides_the_file_which_overrides_the_defaults(config_file: Path) -> None:
    settings = load_settings(config_file=config_file)
    assert settings.profile == "small"
    assert settings.model.hidden_size == 32  # profile
    assert settings.train.max_epochs == 3  # profile over [settings]
    assert settings.train.batch_size == 128  # [settings] over the default
    assert settings.model.num_layers == 6  # the spec's base default


def test_environment_beats_the_file_and_overrides_beat_the_environment(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSUMMIT_TRAIN__MAX_EPOCHS", "7")
    monkeypatch.setenv("DEEPSUMMIT_PROFILE", "large")
    assert load_settings(config_file=config_file).train.max_epochs == 7
    assert load_settings(config_file=config_file).model.hidden_size == 512
    overridden = load_settings(overrides={"train": {"max_epochs": 1}}, config_file=config_file)
    assert overridden.train.max_epochs == 1
    assert load_settings("small", config_file=config_file).model.hidden_size == 32


def test_environment_variables_that_name_no_setting_are_ignored(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSUMMIT_PROJECT_DIR", "/somewhere")
    assert load_settings(config_file=config_file).profile == "small"


def test_an_unknown_profile_or_setting_is_refused(config_file: Path) -> None:
    with pytest.raises(ValueError, match="unknown profile 'huge'; known: large, small"):
        load_settings("huge", config_file=config_file)
    with pytest.raises(ValueError, match="epochs"):
        load_settings(overrides={"train": {"epochs": 3}}, config_file=config_file)


def test_an_optional_weather_variable_is_one_of_the_weather_variables() -> None:
    with pytest.raises(ValueError, match="optional_variables: snowfall not a weather variable"):
        load_settings(overrides={"weather": {"optional_variables": ["snowfall"]}})


def test_relative_paths_resolve_against_the_project_root(config_file: Path) -> None:
    settings = load_settings(
        overrides={"paths": {"warehouse": "elsewhere/w.duckdb"}}, config_file=config_file
    )
    assert settings.paths.warehouse == PROJECT_ROOT / "elsewhere" / "w.duckdb"
    assert settings.paths.data_dir == (PROJECT_ROOT / ".." / "shared" / "data").resolve()
    assert settings.data_location("himalayan/peaks.csv") == str(
        settings.paths.data_dir / "himalayan" / "peaks.csv"
    )
    assert settings.data_location("https://example.org/m.csv") == "https://example.org/m.csv"


def test_the_project_file_has_the_documented_profiles() -> None:
    assert {"base", "cpu", "tiny"} <= set(available_profiles())
    base = load_settings("base")
    assert (base.model.hidden_size, base.model.num_layers, base.model.num_heads) == (256, 6, 8)
    assert (base.model.dropout, base.model.drop_path_rate) == (0.1, 0.1)


def test_dotted_options_become_nested_overrides_without_touching_the_base() -> None:
    base = {"train": {"max_epochs": 2}, "features": {"split": {"test_until": 2018}}}
    merged = nested_overrides(
        {"features.split.train_until": 2010, "paths.warehouse": Path("w.duckdb"), "x.y": None},
        base=base,
    )
    assert merged == {
        "train": {"max_epochs": 2},
        "features": {"split": {"test_until": 2018, "train_until": 2010}},
        "paths": {"warehouse": "w.duckdb"},
    }
    assert base == {"train": {"max_epochs": 2}, "features": {"split": {"test_until": 2018}}}


def test_a_variable_set_on_a_whole_section_names_the_variable_that_works(monkeypatch) -> None:
    monkeypatch.setenv("DEEPSUMMIT_WAREHOUSE", "/tmp/w.duckdb")
    with pytest.raises(ValueError) as raised:
        load_settings("cpu")
    message = str(raised.value)
    assert message.startswith("DEEPSUMMIT_WAREHOUSE names the settings section 'warehouse'")
    assert "did you mean DEEPSUMMIT_PATHS__WAREHOUSE?" in message
    assert "\n" not in message
    monkeypatch.delenv("DEEPSUMMIT_WAREHOUSE")
    monkeypatch.setenv("DEEPSUMMIT_PATHS__WAREHOUSE", "/tmp/w.duckdb")
    assert str(load_settings("cpu").paths.warehouse) == "/tmp/w.duckdb"


def test_a_section_without_a_field_of_that_name_lists_its_fields(monkeypatch) -> None:
    monkeypatch.setenv("DEEPSUMMIT_DRIFT", "0.3")
    fields = "threshold, shift_threshold, weeks_around, min_rows"
    with pytest.raises(ValueError, match=rf"fields: {fields}\)$"):
        load_settings("cpu")
