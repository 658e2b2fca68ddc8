"""Clients of a running scorer over real sockets, for its tests and bench/scorer_load.py: a
well-formed asker, and two hostile clients: one that sends a byte a second, one that announces a
100 MB body and sends it as fast as the scorer takes it."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepsummit.core.config import Settings
from deepsummit.serve.scorer_client import planned_to_json, settings_digest

ANNOUNCED = 100_000_000  # the body the big client announces
CHUNK = 1 << 20
REPEAT_S = 1.0  # a hostile client starts its next connection this long after the last started


@dataclass
class Answer:
    status: int
    body: bytes
    seconds: float  # from connecting to the whole answer read


def connection(settings: Settings) -> http.client.HTTPConnection:
    svc = settings.services
    return http.client.HTTPConnection(svc.host, svc.scorer_port, timeout=300)


def attempts(count: int) -> list[dict[str, Any]]:
    """A planned attempt of its own for each of `count` askers (of 60 ages)."""
    return [
        {
            "peak": "EVER",
            "push_date": dt.date(2019, 5, 20),
            "age": 18 + i % 60,
            "nationality": "USA",
        }
        for i in range(count)
    ]


def ask(settings: Settings, planned: dict[str, Any]) -> Answer:
    """One well-formed predict request, as `ask_scorer` sends it."""
    body = json.dumps({"settings": settings_digest(settings), "planned": planned_to_json(planned)})
    started = time.monotonic()
    asking = connection(settings)
    try:
        asking.request("POST", "/predict", body, headers={"Content-Type": "application/json"})
        response = asking.getresponse()
        return Answer(response.status, response.read(), time.monotonic() - started)
    finally:
        asking.close()


def ask_together(
    settings: Settings, attempts: list[dict[str, Any]], rounds: int
) -> tuple[list[list[Answer]], float]:
    """One asker per attempt, all at once, each asking `rounds` times, one after the other:
    each asker's answers and the wall seconds of all of them."""

    def asker(planned: dict[str, Any]) -> list[Answer]:
        return [ask(settings, planned) for _ in range(rounds)]

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(attempts)) as pool:
        answers = list(pool.map(asker, attempts))
    return answers, time.monotonic() - started


def healthy(settings: Settings) -> bool:
    asking = connection(settings)
    try:
        asking.request("GET", "/health")
        return asking.getresponse().status == 200
    finally:
        asking.close()


def request_head(settings: Settings, length: int) -> bytes:
    host = f"{settings.services.host}:{settings.services.scorer_port}"
    return (
        f"POST /predict HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (what came before a reset, if it resets)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def status_of(answer: bytes) -> int | None:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else None


def slow_sender(settings: Settings) -> tuple[int | None, float]:
    """A request sent a byte a second: its answer's status (None: closed without one) and the
    seconds from connecting to the answer."""
    request = request_head(settings, 2) + b"{}"
    started = time.monotonic()
    svc = settings.services
    with socket.create_connection((svc.host, svc.scorer_port)) as sock:
        for byte in request:
            if select.select([sock], [], [], 1.0)[0]:  # answered (or closed) before the whole
                break
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
        return status_of(read_answer(sock)), time.monotonic() - started


def big_sender(settings: Settings) -> tuple[int | None, int]:
    """A request announcing a body of ANNOUNCED bytes and sending it as fast as the server takes
    it, until the server answers or stops taking it: the answer's status and the bytes of body
    sent."""
    sent = 0
    svc = settings.services
    with socket.create_connection((svc.host, svc.scorer_port)) as sock:
        sock.sendall(request_head(settings, ANNOUNCED))
        sock.settimeout(4 * svc.scorer_read_deadline_s)  # a server that neither reads nor answers
        while sent < ANNOUNCED and not select.select([sock], [], [], 0)[0]:
            try:
                sent += sock.send(b"x" * min(CHUNK, ANNOUNCED - sent))
            except OSError:  # closed under it, or no longer read
                break
        sock.settimeout(None)
        return status_of(read_answer(sock)), sent


@dataclass
class Hostile:
    """What each hostile client got, connection by connection."""

    slow: list[tuple[int | None, float]] = field(default_factory=list)
    big: list[tuple[int | None, int]] = field(default_factory=list)


@contextmanager
def hostile_clients(settings: Settings) -> Iterator[Hostile]:
    """Both hostile clients, each again and again (a new connection at most every REPEAT_S)
    until the block ends; after it, each one's last connection answered."""
    outcomes = Hostile()
    going = threading.Event()
    going.set()

    def again(client: Callable[[Settings], Any], got: list[Any]) -> None:
        while going.is_set():
            started = time.monotonic()
            got.append(client(settings))
            time.sleep(max(0.0, REPEAT_S - (time.monotonic() - started)))

    threads = [
        threading.Thread(target=again, args=(slow_sender, outcomes.slow)),
        threading.Thread(target=again, args=(big_sender, outcomes.big)),
    ]
    for thread in threads:
        thread.start()
    try:
        yield outcomes
    finally:
        going.clear()
        for thread in threads:
            thread.join()


def answering_pids(pid: int) -> list[int]:
    """The scorer's answering processes: the children of its process `pid`."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def resident_bytes(pid: int) -> int:
    """The resident memory of the scorer's process `pid` and its answering processes, a page
    they share split between them (the sum of their PSS): what the scorer costs the machine."""
    total = 0
    for process in (pid, *answering_pids(pid)):
        rollup = Path(f"/proc/{process}/smaps_rollup").read_text()
        [kib] = [line.split()[1] for line in rollup.splitlines() if line.startswith("Pss:")]
        total += int(kib) * 1024
    return total
