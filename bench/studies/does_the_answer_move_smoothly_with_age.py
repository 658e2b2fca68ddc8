"""Does the served answer move smoothly with the member's age? The README's example member asked
of the champion at every age from 18 to 75: its P at each age, and the largest move from one
year to the next.

Answer: in docs/evaluation.md, "Does the served answer follow age?" (the figures this prints).
A member's chance should not drop on a birthday: the map's age shift is a curve, linear between
knots ten years apart (deepsummit/contracts/calibration.py), so the target is a move of at most
0.03 from one year to the next.

    .venv/bin/python bench/studies/does_the_answer_move_smoothly_with_age.py \
        [--peak EVER --push-date 2019-05-20 --sex M --nationality USA]

It asks the champion of the configured registry as `deepsummit predict` does (after
`make train`, with the weather of the warehouse), the member with oxygen on a commercial
expedition.
"""

from __future__ import annotations

import argparse
import datetime as dt

from deepsummit.core.config import load_settings
from deepsummit.serve.predict import predict_attempt

AGES = range(18, 76)
TARGET = 0.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peak", default="EVER")
    parser.add_argument("--push-date", type=dt.date.fromisoformat, default=dt.date(2019, 5, 20))
    parser.add_argument("--sex", default="M")
    parser.add_argument("--nationality", default="USA")
    args = parser.parse_args()
    settings = load_settings()
    member = {
        "peak": args.peak, "push_date": args.push_date, "sex": args.sex,
        "nationality": args.nationality, "oxygen": True, "commercial": True,
    }  # fmt: skip
    answers = {age: predict_attempt(settings, {**member, "age": age}).probability for age in AGES}
    moves = {age: answers[age] - answers[age - 1] for age in AGES[1:]}
    steepest = max(moves, key=lambda age: abs(moves[age]))
    print(f"{args.peak} {args.push_date}, {args.sex}, {args.nationality}, oxygen, commercial")
    print(" ".join(f"{age}:{answers[age]:.3f}" for age in AGES))
    verdict = "within" if abs(moves[steepest]) <= TARGET else "over"
    print(
        f"largest move from one year to the next: {moves[steepest]:+.4f} "
        f"({steepest - 1} → {steepest}), {verdict} the target of {TARGET}"
    )


if __name__ == "__main__":
    main()
