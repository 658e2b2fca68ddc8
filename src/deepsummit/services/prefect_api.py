"""The Prefect server's REST API over urllib, for what must stay light: health checks,
`deepsummit status`, the tests' probes and the browser checks. Prefect's own client costs
seconds of import and reads its settings when imported, so these do without it.

The local server (`deepsummit up`) takes HTTP basic auth with its secret on every request but
its health probe, and a CSRF token on every write: the token is issued by
`GET /csrf-token?client=<id>` and sent back in the Prefect-Csrf-Token and Prefect-Csrf-Client
headers, as Prefect's own client does.

A busy server's transient answers (429, 502, 503, 504, a reset) are retried as Prefect's own
client retries them (deepsummit/core/http_retry.py), for the requests that may be repeated: the
idempotent methods, the reads Prefect takes as POST (`…/filter`, `…/count`, `…/paginate`: the
filter rides in the body) and a body with an `idempotency_key`, which the server deduplicates
(`create_flow_run` answers with the run it made for that key).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from deepsummit.core.http_retry import DEFAULT_RETRY, RetryPolicy, send

# A token this close to its expiry is renewed before a write rather than refused during it.
CSRF_RENEW_BEFORE = timedelta(minutes=1)
# Prefect's reads that are POSTs (their filters ride in the body): repeating one changes nothing.
READ_POST_SUFFIXES = ("/filter", "/count", "/paginate")


class PrefectApi:
    """One client of one Prefect server: `url` is its API root (…/api); `auth_string` is the
    `user:password` the server was started with, None for a server without auth; `retry`, how
    long a request rides out the server's transient answers."""

    def __init__(
        self, url: str, auth_string: str | None, retry: RetryPolicy = DEFAULT_RETRY
    ) -> None:
        self.url = url.rstrip("/")
        self.auth_string = auth_string
        self.retry = retry
        self._client_id = f"deepsummit-{uuid.uuid4()}"
        self._csrf_token: str | None = None
        self._csrf_expires = datetime.min.replace(tzinfo=UTC)

    @property
    def ui_url(self) -> str:
        """The server's root, where its UI is served."""
        return self.url.removesuffix("/api")

    def get(self, path: str, timeout_s: float = 30) -> Any:
        return self.request("GET", path, timeout_s=timeout_s)

    def post(self, path: str, body: dict[str, Any], timeout_s: float = 30) -> Any:
        return self.request("POST", path, body, timeout_s)

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float = 30
    ) -> Any:
        """The decoded JSON answer (None for an empty one); urllib.error.HTTPError for a refusal,
        RetriesExhausted (one line) when the server's transient answers did not stop."""
        headers = {"Content-Type": "application/json", **self._auth_header()}
        if method != "GET":
            headers.update(self._csrf_headers(timeout_s))
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers=headers,
            method=method,
        )
        repeatable = _repeatable(method, path, body)
        _, content = send(request, timeout_s, idempotent=repeatable, retry=self.retry)
        return json.loads(content) if content else None

    def _auth_header(self) -> dict[str, str]:
        if self.auth_string is None:
            return {}
        token = base64.b64encode(self.auth_string.encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _csrf_headers(self, timeout_s: float) -> dict[str, str]:
        if datetime.now(UTC) + CSRF_RENEW_BEFORE >= self._csrf_expires:
            try:
                issued = self.get(f"/csrf-token?client={self._client_id}", timeout_s)
            except urllib.error.HTTPError as error:
                if error.code != 422:  # 422: this server does not check CSRF tokens
                    raise
                self._csrf_token, self._csrf_expires = None, datetime.max.replace(tzinfo=UTC)
            else:
                self._csrf_token = issued["token"]
                self._csrf_expires = datetime.fromisoformat(issued["expiration"])
        if self._csrf_token is None:
            return {}
        return {"Prefect-Csrf-Token": self._csrf_token, "Prefect-Csrf-Client": self._client_id}


def _repeatable(method: str, path: str, body: dict[str, Any] | None) -> bool | None:
    """Whether a POST or PATCH may be sent again after a transient answer; None for the other
    methods, which their idempotence decides. A POST may when it is a read or the server
    deduplicates it. Prefect's PATCHes set the fields they carry to the values sent (a work
    pool's job template, a deployment's paused flag): the second leaves what the first left."""
    if method == "PATCH":
        return True
    if method != "POST":
        return None
    read = urlsplit(path).path.endswith(READ_POST_SUFFIXES)
    return read or (body is not None and "idempotency_key" in body)
