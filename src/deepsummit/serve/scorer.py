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
        413 {"error"}: a body over `services.scorer_max_body_bytes`, refused unread
    GET /health    200
    any request    408 {"error"}: not sent whole within `services.scorer_read_deadline_s`
                   503 {"error"}: every thread busy and the queue full, answered at once
    (the asker answers itself on every status but 200 and 422)

Requests are answered concurrently, in `services.scorer_processes` processes (one per core by
default) that accept from one listening socket, each by `services.scorer_threads` threads taking
up the connections its listening thread accepts; at most `services.scorer_queue` of them wait
for a thread of that process. A thread gives a client `services.scorer_read_deadline_s` in all
to send its request, headers and body: a client that sends slowly, or stops, holds one thread
that long, never the others, and a body is read only up to `services.scorer_max_body_bytes`.
Each process runs one PyTorch thread: the requests' threads are its parallelism.

It listens on the local host only and answers reads only; yet a browser reaches 127.0.0.1 too,
so a request must name the scorer's own address as its Host (no DNS rebinding), and a POST must
be JSON, which a web page cannot send without a CORS preflight that is never allowed.
"""

from __future__ import annotations

import argparse
import ctypes
import io
import json
import logging
import os
import queue
import selectors
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import torch

from deepsummit.contracts.champion import champion_version
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.errors import BadInput, PipelineError
from deepsummit.serve.predict import FORWARD_THREADS, champion_artifact, predict_attempt
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
RESTART_AFTER_S = 1.0  # before an ended answering process is replaced: no fork loop
PR_SET_PDEATHSIG = 1  # linux/prctl.h
BUSY_YIELD_S = 0.02  # how long a process with every thread busy leaves a connection to others


class Scorer(HTTPServer):
    """Requests answered by `services.scorer_threads` threads, taking up the connections the
    listening thread accepted in turn; with `services.scorer_queue` of them waiting already, a
    new one is answered 503 at once."""

    def __init__(self, settings: Settings) -> None:
        svc = settings.services
        # Connections not yet accepted wait in the kernel's backlog, as many as may wait for a
        # thread (the default, 5, drops the connections of a burst, which retry a second later).
        self.request_queue_size = svc.scorer_queue
        super().__init__((svc.host, svc.scorer_port), _Handler)
        self.settings = settings
        self.digest = settings_digest(settings)
        self.hosts = {f"{name}:{svc.scorer_port}" for name in (svc.host, "localhost", "127.0.0.1")}
        self.waiting: queue.Queue[tuple[socket.socket, Any]] = queue.Queue(svc.scorer_queue)
        self.idle_threads = 0  # of this process, waiting for a connection
        self._idle_lock = threading.Lock()
        # Every process's listening thread wakes for a new connection; those that lose the
        # race to accept it get BlockingIOError, which socketserver skips.
        self.socket.setblocking(False)

    def answer(self) -> None:
        """Answer on the listening socket for good: the threads, the champion's loading thread
        and this one accepting. Started in an answering process (`serve`), after its fork: a
        forked process has only the thread that forked."""
        self.refused = _RefusedConnections()
        for number in range(self.settings.services.scorer_threads):
            threading.Thread(
                target=self._answer_waiting, name=f"scorer-{number}", daemon=True
            ).start()
        threading.Thread(target=keep_champion_loaded, args=(self.settings,), daemon=True).start()
        self.serve_forever()

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept a connection; with every thread of this process busy and other processes
        answering, only after BUSY_YIELD_S, so that an idle one takes it first: a process that
        accepted a burst whole would queue it behind its own threads while the others' idled."""
        if not self.idle_threads and self.settings.services.answering_processes > 1:
            time.sleep(BUSY_YIELD_S)
        return super().get_request()

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        """The listening thread's part: queue the connection for a thread, or refuse it."""
        try:
            self.waiting.put_nowait((request, client_address))
        except queue.Full:
            log.warning(
                "%s refused: %d connections wait already", client_address[0], self.waiting.qsize()
            )
            self.refused.refuse(request)

    def _answer_waiting(self) -> None:
        """A thread's loop: one connection after another, as socketserver answers one."""
        while True:
            with self._idle_lock:
                self.idle_threads += 1
            request, client_address = self.waiting.get()
            with self._idle_lock:
                self.idle_threads -= 1
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)


class _ReadDeadlinePassed(Exception):
    """The client has not sent its whole request within `services.scorer_read_deadline_s`."""


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes by a deadline: each read waits only for what is left of the time, so
    a client that sends a byte a second is cut off at the deadline, as one that sends nothing."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.connection, self.deadline = connection, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _ReadDeadlinePassed
        self.connection.settimeout(left)
        try:
            return self.connection.recv_into(buffer)
        except TimeoutError:
            raise _ReadDeadlinePassed from None


class _Handler(BaseHTTPRequestHandler):
    server: Scorer

    def setup(self) -> None:
        super().setup()
        self.deadline_s = self.server.settings.services.scorer_read_deadline_s
        self.rfile.close()  # the socket's own reader, replaced by one that keeps the deadline
        self.rfile = io.BufferedReader(
            _DeadlineReader(self.connection, time.monotonic() + self.deadline_s)
        )
        # What a request cut off before its request line is whole is answered as: parse_request
        # sets both from the line.
        self.requestline, self.request_version = "", "HTTP/1.0"

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except _ReadDeadlinePassed:
            self.close_connection = True
            self._send(408, {"error": f"the request was not sent within {self.deadline_s:g} s"})

    def do_GET(self) -> None:
        if self._routed(HEALTH_PATH):
            self._send(200, {"status": "ok"})

    def do_POST(self) -> None:
        if not self._routed(PREDICT_PATH):
            return
        if self.headers.get_content_type() != "application/json":
            self._send(415, {"error": "a request is JSON (Content-Type: application/json)"})
            return
        limit = self.server.settings.services.scorer_max_body_bytes
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if length < 0:
                raise ValueError(f"Content-Length {length}")
            if length > limit:
                # Refused before a byte of it is read: the body is never held in memory.
                self._send(413, {"error": f"a request body is {limit} bytes at most, not {length}"})
                return
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
        # The deadline's reads left the socket's timeout at what was left of it, maybe nothing:
        # the answer, a few KiB that the socket's buffer takes at once, gets the whole time.
        self.connection.settimeout(self.deadline_s)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _RefusedConnections:
    """Connections answered 503 at once, closed by a thread of their own once their asker has
    sent what it was sending: a socket closed with bytes unread is reset, and an asker still
    writing its request would see a broken pipe in place of the 503 it was sent. A connection
    is closed at its asker's end of sending, after LINGER_S, or when MOST others linger: the
    listening thread only writes the 503 and hands the connection over."""

    LINGER_S = 2.0
    MOST = 64

    def __init__(self) -> None:
        self._handed: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._selector = selectors.DefaultSelector()
        self._deadlines: dict[socket.socket, float] = {}  # oldest first
        threading.Thread(target=self._close_drained, name="scorer-refused", daemon=True).start()

    def refuse(self, connection: socket.socket) -> None:
        """The listening thread's part: write the 503 without waiting (its few bytes go into the
        socket's buffer at once) and read nothing, so a full queue costs it nothing, whatever the
        client does."""
        try:
            connection.setblocking(False)
            connection.sendall(_BUSY)
            connection.shutdown(socket.SHUT_WR)
        except OSError:  # gone already, or not reading: the asker's own timeout answers it
            connection.close()
            return
        self._handed.put(connection)

    def _close_drained(self) -> None:
        while True:
            # Nothing lingering: wait for the next refusal rather than waking for nothing.
            self._take(self._handed.get())
            while self._deadlines:
                while not self._handed.empty():
                    self._take(self._handed.get())
                for key, _ in self._selector.select(timeout=0.1):
                    self._drain(key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                for connection, deadline in list(self._deadlines.items()):  # oldest first
                    if deadline > now and len(self._deadlines) <= self.MOST:
                        break
                    self._close(connection)

    def _take(self, connection: socket.socket) -> None:
        self._selector.register(connection, selectors.EVENT_READ)
        self._deadlines[connection] = time.monotonic() + self.LINGER_S

    def _drain(self, connection: socket.socket) -> None:
        try:
            if connection.recv(65536):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self._close(connection)  # the asker is done sending, or gone

    def _close(self, connection: socket.socket) -> None:
        self._selector.unregister(connection)
        del self._deadlines[connection]
        connection.close()


_BUSY_BODY = json.dumps({"error": "the scorer is busy: every thread answers, the queue is full"})
_BUSY = (
    "HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(_BUSY_BODY)}\r\nConnection: close\r\n\r\n{_BUSY_BODY}"
).encode()


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


def serve(settings: Settings) -> None:
    """Listen, then answer in `services.scorer_processes` processes forked from this one, each
    accepting from the one listening socket (an idle process takes the next connection), and
    start another in place of one that ends. The threads of one process share one interpreter,
    so they get little more than one core between them; the processes are what uses the others.
    PyTorch and the scoring code are imported here once, before the forks; each process loads
    the champion itself. This process only watches: it forks with no other thread running."""
    scorer = Scorer(settings)
    processes = settings.services.answering_processes
    log.info("answering on %s in %d processes", settings.services.scorer_url, processes)
    answering: set[int] = set()
    while True:
        while len(answering) < processes:
            pid = os.fork()
            if pid == 0:
                _end_with_parent()
                scorer.answer()  # never returns
            answering.add(pid)
        pid, status = os.wait()
        answering.discard(pid)
        log.warning("answering process %d ended (wait status %d); starting another", pid, status)
        time.sleep(RESTART_AFTER_S)


def _end_with_parent() -> None:
    """The kernel sends this process SIGKILL when the process that forked it ends, however it
    ends: no answering process outlives its scorer."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() == 1:  # the parent ended before the call
        os._exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The scorer: answers `deepsummit predict`.")
    parser.add_argument("--profile", help="the settings' profile (default: as load_settings)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(levelname)s %(message)s"
    )
    # One PyTorch thread for each process: the requests' threads are the parallelism, and
    # intra-op threads beside them would only contend for the same cores (a forward pass of a
    # few rows gains nothing from a second: FORWARD_THREADS). Set for every thread at once, so
    # that `predict_attempt`'s own setting of it finds it already there and restores nothing
    # under a concurrent request.
    torch.set_num_threads(FORWARD_THREADS)
    serve(load_settings(args.profile))


if __name__ == "__main__":
    main()
