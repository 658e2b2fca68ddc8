"""One planned attempt's answer as `deepsummit predict` shows it: the prediction, what its band
means, its text and its JSON document.

Light on purpose (no PyTorch, Polars or DuckDB): the command line renders an answer the scorer
sent (deepsummit/serve/scorer.py) without importing what computed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from deepsummit.core.planned import season_of

# What the band beside every answer is, in the words the CLI and the outlook print.
BAND_MEANING = (
    "the lowest and highest P of the model's ensemble members: how far they disagree, not a "
    "confidence interval"
)


@dataclass(frozen=True)
class Prediction:
    probability: float
    low: float
    high: float
    top_tokens: str
    notes: str
    weather_used: bool
    model_uri: str
    model_version: str
    weather_source: str
    attempt: Mapping[str, Any]  # the planned attempt as stated (deepsummit/core/planned.py)
    # P of the same attempt with one of the member's own inputs changed: "age 60" → P
    by_member: dict[str, float]
    # The member's groups where the held-out member check found the answer furthest from the
    # summit rate: group, members, observed rate, mean P and the gap's interval.
    least_sure: list[dict[str, Any]]
    # The models that answered, with their weights: "transformer", or its blend with a tree.
    answered_by: str

    def render(self) -> str:
        a = self.attempt
        lines = [
            f"P(summit) = {self.probability:.3f} (band {self.low:.3f}–{self.high:.3f}) for "
            f"{a['peak']} on {a['push_date']} ({season_of(a)}), model {self.model_uri} "
            f"(v{self.model_version}, "
            + (
                f"weather {self.weather_source})"
                if self.weather_used
                else "without weather: the weather took no part)"
            ),
            f"answered by: {self.answered_by}",
            f"band: {BAND_MEANING}",
            "tokens that weighed most (attention rollout from CLS):",
            *(f"  {token}" for token in _listed(self.top_tokens)),
            "the same attempt with the member changed: "
            + " · ".join(f"{change} {p:.3f}" for change, p in self.by_member.items()),
            *self._least_sure_lines(),
        ]
        lines += [f"note: {note}" for note in _listed(self.notes)]
        return "\n".join(lines)

    def _least_sure_lines(self) -> list[str]:
        if not self.least_sure:
            return ["least sure: this version keeps no held-out judgement of member groups"]
        return ["where the model was least sure for this member (held-out members):"] + [
            f"  {g['family']} {g['group']}: mean P {g['mean_probability']:.3f} against "
            f"{g['observed']:.3f} summited, gap {g['gap']:+.3f} [{g['gap_low']:+.3f}, "
            f"{g['gap_high']:+.3f}] over {g['members']:,} members"
            for g in self.least_sure
        ]

    def as_dict(self) -> dict[str, Any]:
        """The prediction as one JSON document (`deepsummit predict --json`): the notes and the
        tokens as lists, the attempt with its season."""
        return {
            **asdict(self),
            "top_tokens": _listed(self.top_tokens),
            "notes": _listed(self.notes),
            "attempt": {**self.attempt, "season": season_of(self.attempt)},
        }

    def answer(self) -> dict[str, Any]:
        """What the scorer sends back: every field but the attempt, which the asker holds."""
        return {name: value for name, value in asdict(self).items() if name != "attempt"}

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any], attempt: Mapping[str, Any]) -> Prediction:
        """The prediction of a scorer's `answer` to `attempt`."""
        names = {field.name for field in fields(cls)} - {"attempt"}
        return cls(**{name: answer[name] for name in names}, attempt=dict(attempt))


def _listed(joined: str) -> list[str]:
    """The items of an answer's "; "-joined column (its notes, its top tokens)."""
    return [item.strip() for item in joined.split(";") if item.strip()]
