"""Open-Meteo's weighted-call formula and the sliding-window rate limiter (fake clock)."""

from __future__ import annotations

import pytest

from deepsummit.core.errors import QuotaExhausted
from deepsummit.core.weather_sections import RateLimits
from deepsummit.weather.cost import RateLimiter, max_days_for, weighted_calls


def test_weight_of_a_90_day_window_with_15_variables() -> None:
    assert weighted_calls(15, 90) == pytest.approx(1.5 * 90 / 14)  # ≈ 9.64, as in the issue


def test_short_spans_and_few_variables_cost_at_least_one_call_per_location() -> None:
    assert weighted_calls(15, 7) == pytest.approx(1.5)  # under 14 days the days are free
    assert weighted_calls(5, 3) == 1.0
    assert weighted_calls(5, 28) == pytest.approx(1.0)  # 0.5 × 2 = 1.0
    assert weighted_calls(15, 90, locations=3) == pytest.approx(3 * weighted_calls(15, 90))


def test_max_days_keeps_one_location_within_budget() -> None:
    days = max_days_for(15, 300)
    assert weighted_calls(15, days) <= 300 < weighted_calls(15, days + 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def limiter(clock: FakeClock, **limits: float) -> RateLimiter:
    return RateLimiter(RateLimits(**limits), clock=clock, sleep=clock.sleep)


def test_waits_until_the_minute_window_has_room() -> None:
    clock = FakeClock()
    rl = limiter(clock, per_minute=20, per_hour=1000, per_day=10_000)
    rl.acquire(10)
    clock.now += 5
    rl.acquire(10)
    assert clock.sleeps == []
    rl.acquire(10)  # 30 > 20: wait until the first call leaves the window (t=1060)
    assert clock.sleeps == [pytest.approx(55.0)]
    assert rl.used(60) == pytest.approx(20)


def test_waits_for_the_hour_window() -> None:
    clock = FakeClock()
    rl = limiter(clock, per_minute=100, per_hour=25, per_day=10_000)
    for _ in range(2):
        rl.acquire(10)
        clock.now += 61
    rl.acquire(10)  # hour holds 20 + 10 > 25: the first call expires at t=4600
    assert clock.sleeps == [pytest.approx(3600 - 122)]


def test_day_window_raises_instead_of_waiting() -> None:
    clock = FakeClock()
    rl = limiter(clock, per_minute=100, per_hour=100, per_day=25)
    rl.acquire(10)
    clock.now += 3600
    rl.acquire(10)
    with pytest.raises(QuotaExhausted, match="daily budget"):
        rl.acquire(10)
    clock.now += 86_400 - 3600 + 1  # the first call leaves the day window
    rl.acquire(10)
    assert clock.sleeps == []


def test_refund_returns_a_cache_hit() -> None:
    clock = FakeClock()
    rl = limiter(clock, per_minute=10, per_hour=100, per_day=100)
    rl.acquire(10)
    rl.refund_last()
    rl.acquire(10)
    assert clock.sleeps == []


def test_a_request_heavier_than_a_window_is_refused() -> None:
    rl = limiter(FakeClock(), per_minute=5, per_hour=100, per_day=100)
    with pytest.raises(QuotaExhausted, match="exceeds the limit"):
        rl.acquire(9.6)
