"""The member groups a user belongs to, declared once: what the evaluation judges the model's
calibration by (deepsummit/train/member_groups.py), what the registered model keeps of that
judgement, and what `predict` names for the member it answers (deepsummit/serve/predict.py).

A group is a value of one member attribute: an age band, a sex, hired staff or not, an oxygen
plan, a team role, a nationality (Nepal or another). Each family is a Polars expression over
the features snapshot's columns.
"""

from __future__ import annotations

import polars as pl

# The columns the groups read (features snapshot columns; `role` is not a model input).
MEMBER_COLUMNS = ("age", "sex", "is_hired", "oxygen_planned", "role", "nationality")


def _age_band() -> pl.Expr:
    age = pl.col("age")
    return (
        pl.when(age < 30)
        .then(pl.lit("under 30"))
        .when(age < 40)
        .then(pl.lit("30s"))
        .when(age < 50)
        .then(pl.lit("40s"))
        .when(age < 60)
        .then(pl.lit("50s"))
        .when(age >= 60)
        .then(pl.lit("60 and over"))
    )


def _flag(column: str, yes: str, no: str) -> pl.Expr:
    return pl.when(pl.col(column) == 1).then(pl.lit(yes)).when(pl.col(column) == 0).then(pl.lit(no))


def _role() -> pl.Expr:
    """The records' expedition roles in four: hired staff apart, leaders, climbers, the rest
    (doctors, base-camp managers, film crews: members who rarely go high)."""
    role = pl.col("role").str.to_lowercase()
    return (
        pl.when(pl.col("is_hired") == 1)
        .then(pl.lit("hired staff"))
        .when(role.str.contains("leader"))
        .then(pl.lit("leader"))
        .when(role.str.starts_with("climber") | (role == "member"))
        .then(pl.lit("climber"))
        .when(role.is_not_null())
        .then(pl.lit("other roles"))
    )


# Each family: the group of a member row (null: the row says nothing of it).
GROUP_FAMILIES: dict[str, pl.Expr] = {
    "age": _age_band(),
    "sex": pl.when(pl.col("sex") == 1).then(pl.lit("M")).when(pl.col("sex") == 0).then(pl.lit("F")),
    "hired staff": _flag("is_hired", "hired", "not hired"),
    "oxygen plan": _flag("oxygen_planned", "oxygen planned", "no oxygen planned"),
    "role": _role(),
    "nationality": pl.when(pl.col("nationality") == "Nepal")
    .then(pl.lit("Nepal"))
    .when(pl.col("nationality").is_not_null())
    .then(pl.lit("other")),
}


def member_groups(rows: pl.DataFrame) -> pl.DataFrame:
    """One column per family: each row's group (null where the row says nothing of it)."""
    return rows.select(**GROUP_FAMILIES)


# Where an age band starts: what `predict` asks the model at, to show how P moves with age.
AGE_BAND_STARTS: tuple[int, ...] = (20, 30, 40, 50, 60, 70)
