"""What the train stage reports: the recipe judged as served, the version registered and the
gate's decision; rendered for the run's summary, and handed to the chain as data
(deepsummit/contracts/training_report.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.training_report import Build, LineageRow, TrainingReport
from deepsummit.train.comparison import Comparison
from deepsummit.train.evaluation import Evaluation
from deepsummit.train.member_groups import ALL_PEAKS


@dataclass(frozen=True)
class TrainReport:
    mlflow_run_id: str
    experiment_id: str
    model_name: str
    model_version: str
    champion: bool
    decision_reason: str
    evaluation: Evaluation
    tracking_uri: str
    run_url: str
    model_url: str
    weather_source: str
    digest: str  # the features table's content digest
    test_digest: str
    rows: dict[str, int]  # attempts: the test split, those before it, the check's, the refit's
    member_check_years: tuple[int, ...]
    calibrator: Calibrator  # the registered model's map, fitted on the member check
    seeds: tuple[int, ...]
    epochs: tuple[int, ...]  # each seed's epochs in every training (the check kept them)
    inputs: tuple[str, ...]
    trained_through: str  # the newest season the registered model learnt from

    @property
    def comparison(self) -> Comparison:
        return self.evaluation.comparison

    def judged_line(self) -> str:
        """What was judged on what, in one sentence."""
        years = "–".join(map(str, self.member_check_years[:: len(self.member_check_years) - 1]))
        return (
            f"Judged as served: the test split's {self.rows['test']:,} attempts answered by the "
            f"recipe trained on the {self.rows['before test']:,} before them; the member check's "
            f"{self.rows['member check']:,} members of {years} by the recipe trained on the years "
            f"before them (its map: {self.calibrator.describe()}). Seeds "
            f"{', '.join(map(str, self.seeds))}, epochs {', '.join(map(str, self.epochs))}. "
            f"Registered: the recipe trained on all {self.rows['refit']:,} attempts, through "
            f"{self.trained_through}."
        )

    def expeditions_markdown(self) -> list[str]:
        """The test split's expedition records judged by expedition, when it has any."""
        if self.evaluation.expeditions is None:
            return []
        return [
            "Expedition records of the test split, expedition by expedition (each P is its "
            "members' one P; AUC of the expedition's success within each season, Brier score "
            "of its summit fraction, mean P against the members' summit fraction):",
            "",
            self.evaluation.expeditions.markdown(),
        ]

    def member_groups_markdown(self) -> str:
        """The member check judged member group by member group, all peaks."""
        return "Member check, " + self.evaluation.member_groups[ALL_PEAKS].markdown()

    def tables_markdown(self) -> str:
        """The comparison, the test split's expeditions and the member groups, rendered."""
        return "\n".join(
            [
                self.comparison.markdown(),
                *self.expeditions_markdown(),
                self.member_groups_markdown(),
            ]
        )

    def handed(self, build: Build, lineage: Sequence[LineageRow]) -> TrainingReport:
        """What the chain shows of this report, as data (deepsummit/contracts/training_report.py),
        with the training's `lineage` rows."""
        return TrainingReport(
            package_version=build.package_version,
            model_spec=build.model_spec,
            mlflow_run_id=self.mlflow_run_id,
            model_name=self.model_name,
            model_version=self.model_version,
            champion=self.champion,
            decision_reason=self.decision_reason,
            weather_source=self.weather_source,
            digest=self.digest,
            inputs=self.inputs,
            test_auc=float(self.comparison.rows[0].calibrated.auc.estimate),
            served=self.evaluation.served_parts,
            judged_line=self.judged_line(),
            tables_markdown=self.tables_markdown(),
            run_url=self.run_url,
            model_url=self.model_url,
            lineage=tuple(lineage),
        )

    def render(self) -> str:
        status = "champion" if self.champion else "challenger"
        return "\n".join(
            [
                self.judged_line(),
                f"Weather source {self.weather_source}; features {self.digest[:12]}; "
                f"{len(self.inputs)} tabular inputs.",
                "",
                self.tables_markdown(),
                f"{self.model_name} v{self.model_version} ({status}, answered by "
                f"{self.evaluation.served_parts}): {self.decision_reason}",
                f"run:   {self.run_url}",
                f"model: {self.model_url}",
            ]
        )
