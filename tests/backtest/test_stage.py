"""The backtest stage on the bundle's real features snapshot (tiny profile, two folds): every
fold answered as the registered model answers (trained on every season before its test year,
through the map of its member check), trained once and cached, a crash resumes at the next
fold, a fold that cannot train is reported, and the report reaches disk and MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from deepsummit.backtest.answers import FoldAnswers
from deepsummit.backtest.cache import _fold_files, fold_directories, trainings_directory
from deepsummit.backtest.folds import Fold
from deepsummit.backtest.outcome import BASELINES, MODELS, fold_outcome
from deepsummit.backtest.run import fold_jobs, run_backtest
from deepsummit.backtest.stage import backtest
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.features.groups import MOST_CLIMBED, PEAK_GROUPS, WEATHER_PEAKS
from deepsummit.train.comparison import TRANSFORMER
from deepsummit.train.evaluation import WITHOUT_MAP
from deepsummit.train.member_groups import ALL_PEAKS
from deepsummit.train.recipe import Recipe, member_check, train_seeds

pytest_plugins = ["features_fixtures"]
pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def setup(bundle_features, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path]:
    features_settings, report, _ = bundle_features
    root = tmp_path_factory.mktemp("backtest")
    settings = load_settings(
        "tiny",
        {
            "paths": {"warehouse": str(features_settings.paths.warehouse)},
            "features": features_settings.features.model_dump(mode="json"),
            "mlflow": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}"},
            "train": {"seeds": 1, "max_epochs": 2, "max_train_rows": 8000, "num_threads": 1},
            "backtest": {
                "first_test_year": 2018,
                "last_test_year": 2019,
                "output_dir": str(root / "backtest"),
            },
        },
    )
    return settings, report.directory


@pytest.fixture(scope="module")
def first(setup):
    settings, snapshot = setup
    return backtest(settings, RunContext(settings.paths.runs_dir / "bt"), snapshot)


def test_every_fold_trains_and_every_held_out_row_is_scored(first, setup, bundle_features) -> None:
    _, _, features = bundle_features
    report = first.report
    assert [(o.fold.name, o.cached, o.skipped) for o in report.folds] == [
        ("2018", False, None),
        ("2019", False, None),
    ]
    years = features.filter(features["year"].is_in([2018, 2019]))
    held_out = years.filter(years["record"] == "member").height
    assert sum(s.rows for s in report.seasons.seasons) == held_out  # the members file's seasons
    assert tuple(report.groups) == PEAK_GROUPS
    assert sum(table.rows for table in report.groups.values()) == held_out  # each row once
    # The expeditions without member rows (Autumn and Winter 2019, a few of Spring 2018 and
    # 2019) are judged by expedition; of their seasons only Autumn 2019 has enough of them.
    expeditions = {s.season: s for s in report.expeditions.seasons}
    assert [s for s, season in expeditions.items() if season.scored] == ["2019 Autumn"]
    assert expeditions["2019 Autumn"].expeditions > 100
    assert expeditions["2019 Winter"].note.startswith("not scored:")
    assert sum(s.members for s in expeditions.values()) == years.height - held_out
    for model in MODELS:
        assert 0.5 < report.expeditions.within[model].estimate < 1.0
    assert report.groups[WEATHER_PEAKS].scored_seasons > 0
    assert report.groups[MOST_CLIMBED].scored_seasons > 0
    for model in MODELS:
        assert 0.5 < report.seasons.within[model].estimate < 1.0
    skill = report.push_days
    assert skill.seasons, "the bundle has peak-seasons with 30 summiters in 2018–19"
    for season in skill.seasons:
        assert season.days >= 2
        assert all(-1 <= v <= 1 for v in season.spearman.values() if v == v)
    assert 0.0 <= report.seed_spread < 0.5
    # Each fold's map was fitted on its member check: the two member years before it, answered
    # by the recipe trained on the years before them.
    checks = [o.summary["member_check"] for o in report.folds]
    assert [c["years"] for c in checks] == [[2016, 2017], [2017, 2018]]
    assert all(c["map"]["method"] == setup[0].train.calibration for c in checks)
    # The member seasons by member group, every model and the transformer without its map.
    groups = report.member_groups[ALL_PEAKS]
    assert set(groups.models) == {*MODELS, WITHOUT_MAP}
    counted = [row for row in groups.rows if row.counted]
    assert {row.family for row in counted} >= {"age", "sex", "hired staff", "oxygen plan"}
    assert sum(row.members for row in groups.rows if row.family == "hired staff") == held_out
    assert len(report.member_groups) == 4  # all peaks and the three with the most members


def test_the_report_reaches_disk_and_mlflow(first, setup) -> None:
    settings, _ = setup
    text = first.files["report"].read_text()
    assert "mean within-season AUC" in text and "Push-day skill" in text
    assert first.files["seasons"].stat().st_size > 0
    run = MlflowClient(settings.mlflow.tracking_uri).get_run(first.mlflow_run_id)
    assert run.data.tags["kind"] == "backtest"
    assert "backtest_transformer_within_season_auc" in run.data.metrics
    assert "push_day_transformer_weather_masked_spearman" in run.data.metrics
    assert "push_day_transformer_spearman" in run.data.metrics
    assert "By peak group" in text
    assert "backtest_weather_peaks_transformer_within_season_auc" in run.data.metrics
    assert "Seasons of expedition records" in text
    assert "backtest_expeditions_transformer_within_season_auc" in run.data.metrics
    assert "backtest_expeditions_catboost_mean_p_gap" in run.data.metrics
    assert "Member seasons by member group" in text and "What the map does" in text
    assert "backtest_member_seasons_transformer_group_error" in run.data.metrics
    assert "backtest_lightgbm_flat" in run.data.metrics


def test_a_rerun_trains_nothing_and_a_crash_resumes_at_the_next_fold(first, setup) -> None:
    settings, snapshot = setup
    again = run_backtest(settings, snapshot)
    assert all(o.cached for o in again.folds)
    assert again.seasons.within == first.report.seasons.within
    # A run that died during the 2019 fold: its summary (written last) is missing.
    _fold_files(first.report.directory, Fold(2019))["summary"].unlink()
    resumed = run_backtest(settings, snapshot)
    assert [o.cached for o in resumed.folds] == [True, False]


def test_another_map_rescores_the_folds_and_trains_nothing(first, setup) -> None:
    """The map is fitted after training: the same folds under a temperature without the age
    shifts are scored anew from the trainings cached for the first run, none trained again."""
    settings, snapshot = setup
    trained = sorted(trainings_directory(settings, snapshot).rglob("*.pt"))
    assert trained, "the first run's trainings are cached"
    written = [path.stat().st_mtime_ns for path in trained]
    plain = settings.model_copy(
        update={"train": settings.train.model_copy(update={"calibration_shifts_by": ()})}
    )
    again = run_backtest(plain, snapshot)
    assert [o.cached for o in again.folds] == [False, False]
    assert [path.stat().st_mtime_ns for path in trained] == written
    for shifted, unshifted in zip(first.report.folds, again.folds, strict=True):
        assert set(shifted.summary["member_check"]["map"]["group_shifts"]) == {"age"}
        assert unshifted.summary["member_check"]["map"]["group_shifts"] == {}
        held, held_plain = shifted.held_out, unshifted.held_out
        assert held["raw_transformer"].to_list() == held_plain["raw_transformer"].to_list()
        assert held["transformer"].to_list() != held_plain["transformer"].to_list()


def test_a_fold_trained_elsewhere_scores_as_the_fold_trained_here(
    first, setup, tmp_path: Path
) -> None:
    """bench/gpu.py trains a fold on a GPU machine and sends back its answers only: read back
    and scored here, they give the held-out rows and push days the backtest's own fold has."""
    settings, snapshot = setup
    (job,) = fold_jobs(settings, snapshot, [2019])
    recipe = Recipe.of(settings)
    check = member_check(recipe, job.check, tmp_path / "check")
    served = train_seeds(
        recipe,
        {"train": job.arrays["train"], "validation": None},
        job.preprocessor.model_dimensions(),
        tmp_path / "served",
        epochs=check.epochs(recipe.training),
    )
    FoldAnswers.of(check.logits, check.trainings, served, job.arrays["test"], job.day_arrays).save(
        tmp_path / "fold-2019.npz"
    )
    answers = FoldAnswers.load(tmp_path / "fold-2019.npz")
    _, baselines = fold_directories(settings, snapshot)
    outcome = fold_outcome(settings, job, answers, baselines, seconds=0.0)
    (here,) = (o for o in first.report.folds if o.fold.name == "2019")
    assert outcome.held_out.equals(here.held_out)
    assert outcome.push_days.height > 0 and outcome.push_days.equals(here.push_days)
    assert outcome.summary["epochs"] == here.summary["epochs"]


def test_a_candidate_that_changes_the_transformer_reuses_the_baselines(first, setup) -> None:
    """Another transformer trains its folds anew (here the 2019 fold alone); the baselines'
    scores are read back."""
    settings, snapshot = setup
    candidate = settings.model_copy(
        update={
            "train": settings.train.model_copy(update={"learning_rate": 2e-3}),
            "backtest": settings.backtest.model_copy(update={"first_test_year": 2019}),
        }
    )
    report = run_backtest(candidate, snapshot)
    assert report.directory != first.report.directory
    [fold] = report.folds
    assert fold.fold.name == "2019" and not fold.cached
    (served,) = (o.held_out for o in first.report.folds if o.fold.name == "2019")
    for model in BASELINES:
        assert fold.held_out[model].equals(served[model])
    assert not fold.held_out[TRANSFORMER].equals(served[TRANSFORMER])


def test_a_fold_that_cannot_train_is_reported_not_dropped(setup) -> None:
    settings, snapshot = setup
    early = settings.model_copy(
        update={
            "backtest": settings.backtest.model_copy(
                update={"first_test_year": 1900, "last_test_year": 1900}
            )
        }
    )
    with pytest.raises(Exception, match="1900: no test rows"):
        run_backtest(early, snapshot)
