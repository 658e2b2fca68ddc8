"""Asking the scorer (deepsummit/serve/scorer.py) for `deepsummit predict`'s answer over HTTP.

A scorer answers only for the settings it was started with: every request carries a digest of
the asker's settings, and a scorer of other settings (another profile, warehouse or registry)
declines, so that the asker answers in its own process. Light on purpose: no PyTorch, Polars or
DuckDB, which are most of a `predict` process's start.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from deepsummit.core.config import Settings
from deepsummit.core.errors import BadInput
from deepsummit.core.planned import FIELDS_BY_NAME
from deepsummit.serve.prediction import Prediction

PREDICT_PATH = "/predict"
HEALTH_PATH = "/health"
BAD_INPUT_STATUS = 422  # the request's attempt is bad: the asker's answer would say the same
OTHER_SETTINGS_STATUS = 409  # the scorer runs with other settings than the asker's
# A quiet machine answers in a fraction of a second; a scorer that takes this long is left for
# the asker's own answer.
TIMEOUT_S = 30.0

log = logging.getLogger(__name__)
# No proxy between a command and the scorer of its own machine, whatever http_proxy says.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def settings_digest(settings: Settings) -> str:
    """What tells two processes' settings apart: the sha256 of every value."""
    return hashlib.sha256(settings.model_dump_json().encode()).hexdigest()


def planned_to_json(planned: Mapping[str, Any]) -> dict[str, Any]:
    """A planned attempt (deepsummit/core/planned.py) as JSON values: dates as ISO text."""
    return {
        name: value.isoformat() if isinstance(value, dt.date) else value
        for name, value in planned.items()
    }


def planned_from_json(document: Mapping[str, Any]) -> dict[str, Any]:
    """The planned attempt `planned_to_json` wrote (a name that is no field is kept, for the
    answer to name it)."""
    field_types = {name: field.type for name, field in FIELDS_BY_NAME.items()}
    return {
        name: dt.date.fromisoformat(value)
        if field_types.get(name) == "date" and value is not None
        else value
        for name, value in document.items()
    }


def ask_scorer(settings: Settings, planned: Mapping[str, Any]) -> Prediction | None:
    """The scorer's prediction for `planned`, or None when no scorer answers for these settings:
    none is set up or listening, it runs with other settings, or it failed or was too busy to
    take the request (503: every thread answering and its queue full; then the reason is
    logged). The caller then answers in its own process. Bad input raises BadInput with the
    line the caller's own answer would give."""
    if not settings.services.scorer:
        return None
    url = settings.services.scorer_url + PREDICT_PATH
    body = {"settings": settings_digest(settings), "planned": planned_to_json(planned)}
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _opener.open(request, timeout=TIMEOUT_S) as response:
            return Prediction.from_answer(json.load(response), planned)
    except urllib.error.HTTPError as error:
        reason = _error_line(error)
        if error.code == BAD_INPUT_STATUS:
            raise BadInput(reason) from None
        if error.code != OTHER_SETTINGS_STATUS:
            log.warning(
                "the scorer at %s answered %s (%s); answering here", url, error.code, reason
            )
        return None
    except urllib.error.URLError as error:
        if not isinstance(error.reason, ConnectionRefusedError):  # refused: no scorer is up
            log.warning("the scorer at %s did not answer (%s); answering here", url, error.reason)
        return None
    except (OSError, ValueError, KeyError) as error:  # cut off, timed out, not an answer
        log.warning("the scorer at %s did not answer (%s); answering here", url, error)
        return None


def _error_line(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.load(error)["error"])
    except (ValueError, KeyError, TypeError):
        return error.reason
