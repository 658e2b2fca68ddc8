"""A real HTTP server on a free 127.0.0.1 port that gives scripted answers, for the tests of the
project's own HTTP clients: each request takes the next answer of the script (a status with
headers, or a connection reset), the last one repeated once the script is spent; every request
is recorded with its arrival time."""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RESET = "reset"  # close the connection with a TCP RST instead of answering


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # sent as JSON when not None


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    at: float  # time.monotonic() on arrival


class ScriptedServer:
    def __init__(self, *script: Answer | str) -> None:
        self.script = list(script)
        self.received: list[Received] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                with lock:
                    server.received.append(Received(self.command, self.path, time.monotonic()))
                    answer = server.script.pop(0) if len(server.script) > 1 else server.script[0]
                if answer == RESET:
                    # SO_LINGER with a zero timeout: close() sends RST, as a server that drops
                    # a connection under load does.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    self.connection.close()
                    return
                body = b"" if answer.body is None else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:  # keep the test output quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def gaps(self) -> list[float]:
        """Seconds between one request's arrival and the next's."""
        times = [request.at for request in self.received]
        return [later - earlier for earlier, later in itertools.pairwise(times)]


@contextmanager
def scripted_server(*script: Answer | str) -> Iterator[ScriptedServer]:
    server = ScriptedServer(*script)
    thread = threading.Thread(target=server._server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._server.shutdown()
        server._server.server_close()
        thread.join()
