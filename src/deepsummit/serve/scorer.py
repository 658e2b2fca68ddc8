"""The scorer: `deepsummit predict` answered by a process that stays up.

`deepsummit up` starts it (`services.scorer`, on `services.scorer_port`). It imports PyTorch and
the scoring code once and keeps the champion's artifact loaded, one per version
(`loaded_artifact`). Every request is answered by `predict_attempt`, the function a `predict`
process runs alone, so the answer is the same to the last bit; the champion is looked up on
every request, so a new champion answers from the next request on. A thread loads the champion
every LOAD_EVERY_S as well, so that the first request after a new one (the nightly retraining's)
does not wait for its download and load. The command line asking it
(deepsummit/serve/scorer_client.py) imports neither PyTorch nor the scoring code, which were
most of its time.

    POST /predict  {"settings": digest, "planned": {...}}
        200 the prediction's fields (deepsummit/serve/prediction.py)
        422 {"error"}: bad input, the line a `predict` process would print
        409: a digest of other settings than the scorer's: the asker answers itself
        503 {"error"}: a pipeline error (no champion, the registry down): the asker answers
            itself, and so fails with that error's own exit code
    GET /health    200

It listens on the local host only and answers reads only; yet a browser reaches 127.0.0.1 too,
so a request must name the scorer's own address as its Host (no DNS rebinding), and a POST must
be JSON, which a web page cannot send without a CORS preflight that is never allowed.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from deepsummit.contracts.champion import champion_version
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.errors import BadInput, PipelineError
from deepsummit.serve.predict import champion_artifact, predict_attempt
from deepsummit.serve.scorer_client import (
    BAD_INPUT_STATUS,
    HEALTH_PATH,
    OTHER_SETTINGS_STATUS,
    PREDICT_PATH,
    planned_from_json,
    settings_digest,
)

log = logging.getLogger(__name__)
# How often the scorer loads the champion before anyone asks: a registry question, and the
# copy's digest checked, a few milliseconds each time. Sooner while it has none loaded: `up`
# starts the scorer before the registry, and the first training registers one.
LOAD_EVERY_S = 30.0
RETRY_S = 5.0


class Scorer(HTTPServer):
    """One request at a time: a request takes milliseconds, and one PyTorch thread."""

    def __init__(self, settings: Settings) -> None:
        svc = settings.services
        super().__init__((svc.host, svc.scorer_port), _Handler)
        self.settings = settings
        self.digest = settings_digest(settings)
        self.hosts = {f"{name}:{svc.scorer_port}" for name in (svc.host, "localhost", "127.0.0.1")}


class _Handler(BaseHTTPRequestHandler):
    server: Scorer
    timeout = 60  # a client that stops sending mid-request frees the scorer after this

    def do_GET(self) -> None:
        if self._routed(HEALTH_PATH):
            self._send(200, {"status": "ok"})

    def do_POST(self) -> None:
        if not self._routed(PREDICT_PATH):
            return
        if self.headers.get_content_type() != "application/json":
            self._send(415, {"error": "a request is JSON (Content-Type: application/json)"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            planned = planned_from_json(body["planned"])
        except (ValueError, KeyError, TypeError) as error:
            self._send(400, {"error": f"not a predict request: {error}"})
            return
        if body.get("settings") != self.server.digest:
            self._send(OTHER_SETTINGS_STATUS, {"error": "the scorer runs with other settings"})
            return
        self._send(*self._answer(planned))

    def _answer(self, planned: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            return 200, predict_attempt(self.server.settings, planned).answer()
        except BadInput as error:
            return BAD_INPUT_STATUS, {"error": str(error)}
        except PipelineError as error:
            return 503, {"error": str(error)}
        except Exception as error:  # the scorer stays up for the next request; the log says why
            log.exception("predict failed")
            return 500, {"error": f"{type(error).__name__}: {error}"}

    def _routed(self, path: str) -> bool:
        """The request names the scorer's own host and `path`; otherwise it is answered here,
        403 or 404."""
        if self.headers.get("Host") not in self.server.hosts:
            self._send(403, {"error": "the Host header names another server"})
        elif self.path != path:
            self._send(404, {"error": f"no {self.path}"})
        else:
            return True
        return False

    def _send(self, status: int, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def keep_champion_loaded(settings: Settings, every_s: float = LOAD_EVERY_S) -> None:
    """Load the champion now and every `every_s`, for ever (a daemon thread's loop); a round
    that cannot (no champion yet, the registry away) is tried again after RETRY_S."""
    said = None  # the last line logged: each change once, not every round
    while True:
        try:
            champion = champion_version(settings.mlflow)
            champion_artifact(settings, champion)
            line, wait_s = f"{champion.name} v{champion.version} loaded", every_s
        except Exception as error:  # the scorer answers on; the log says why
            line, wait_s = f"the champion not loaded: {error}", min(every_s, RETRY_S)
        if line != said:
            log.info(line)
            said = line
        time.sleep(wait_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The scorer: answers `deepsummit predict`.")
    parser.add_argument("--profile", help="the settings' profile (default: as load_settings)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings = load_settings(args.profile)
    scorer = Scorer(settings)
    threading.Thread(target=keep_champion_loaded, args=(settings,), daemon=True).start()
    scorer.serve_forever()


if __name__ == "__main__":
    main()
