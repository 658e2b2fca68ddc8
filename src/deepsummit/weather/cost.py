"""Open-Meteo's weighted-call accounting and a limiter that keeps a run under its quotas.

Open-Meteo counts one request as several calls when it asks for more than 10 variables or
more than 14 days: per location, `max(1, v/10, v/10 × days/14)`, summed over the locations of a
multi-location request (open-meteo `ForecastapiResult.calculateQueryWeight`; a floor of one
call per location). 15 variables × 90 days = 1.5 × 6.43 ≈ 9.64 calls.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from deepsummit.core.errors import QuotaExhausted
from deepsummit.core.weather_sections import RateLimits

REFERENCE_VARIABLES = 10
REFERENCE_DAYS = 14
DAY_S = 86_400.0


def weighted_calls(variables: int, days: int, locations: int = 1) -> float:
    """Calls Open-Meteo charges for `locations` places, each over the same `days` span."""
    variables_fraction = variables / REFERENCE_VARIABLES
    per_location = max(1.0, variables_fraction, variables_fraction * days / REFERENCE_DAYS)
    return per_location * locations


def max_days_for(variables: int, budget: float) -> int:
    """The longest span one location may ask for without its weight exceeding `budget`."""
    return max(REFERENCE_DAYS, int(budget * REFERENCE_VARIABLES * REFERENCE_DAYS / variables))


@dataclass
class RateLimiter:
    """Sliding minute/hour/day windows over weighted calls.

    `acquire(weight)` waits (through the injectable `sleep`) until the minute and hour windows
    have room, and raises QuotaExhausted when the day window has none: waiting up to a day is no
    use to a person at a terminal, and a rerun tomorrow fetches only what is still missing.
    `calls` starts from what earlier runs sent (`ledger.calls_since`), hence a wall clock; the
    server's own daily-limit answer stays the backstop for calls sent from elsewhere.
    """

    limits: RateLimits
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    calls: deque[tuple[float, float]] = field(default_factory=deque)
    waited_s: float = 0.0

    def used(self, window_s: float) -> float:
        now = self.clock()
        return sum(weight for at, weight in self.calls if at > now - window_s)

    def acquire(self, weight: float) -> None:
        self._forget(older_than_s=DAY_S)
        if self.used(DAY_S) + weight > self.limits.per_day:
            raise QuotaExhausted(
                f"Open-Meteo daily budget reached: {self.used(DAY_S):.1f} of "
                f"{self.limits.per_day:g} weighted calls used in the last 24 h, the next request "
                f"needs {weight:.1f}"
            )
        for window_s, limit in ((60.0, self.limits.per_minute), (3_600.0, self.limits.per_hour)):
            if weight > limit:
                raise QuotaExhausted(
                    f"one request of {weight:.1f} weighted calls exceeds the limit of {limit:g} "
                    f"per {window_s:g} s"
                )
            wait = self._wait_for(window_s, limit, weight)
            if wait > 0:
                self.sleep(wait)
                self.waited_s += wait
        self.calls.append((self.clock(), weight))

    def refund_last(self) -> None:
        """Take back the last acquisition (the answer came from the local cache)."""
        if self.calls:
            self.calls.pop()

    def _wait_for(self, window_s: float, limit: float, weight: float) -> float:
        """Seconds until enough of the window's oldest calls expire to fit `weight`."""
        now = self.clock()
        in_window = [(at, w) for at, w in self.calls if at > now - window_s]
        excess = sum(w for _, w in in_window) + weight - limit
        if excess <= 0:
            return 0.0
        freed = 0.0
        for at, w in in_window:  # oldest first
            freed += w
            if freed >= excess:
                return at + window_s - now
        return window_s

    def _forget(self, older_than_s: float) -> None:
        now = self.clock()
        while self.calls and self.calls[0][0] <= now - older_than_s:
            self.calls.popleft()
