"""Two hosts on one machine, for tests: a data host and a training host, each a network namespace
of its own, joined by a veth pair whose two addresses exist only inside them.

Neither namespace has a default route, and the addresses are of TEST-NET-1 (RFC 5737, never
routed on a real network): a request from either side reaches the other side's address and
nothing else (no loopback of the machine, no address outside it); one to anywhere else fails at
once ("Network is unreachable"), so no request loop can wait on the network. The data host is
known to the training host by name only: `Network.hosts` is a hosts file, mapping DATA_HOST to the
data side's address, that a process binds over /etc/hosts in a mount namespace of its own (as
tests/remote_worker.py does for its workers).

The test's own process joins the data host for a while (`inside`): the servers it starts, the
workers it spawns and its own clients then live there. Only the calling thread moves (a network
namespace is a thread's), and it moves back when the block ends.

Everything is removed in `finally`, whether the test passed or not: deleting a namespace deletes
the veth end in it, and with it the other end.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DATA_HOST = "deepsummit-data"  # the name the training host knows the servers by
DATA_ADDRESS, TRAINING_ADDRESS = "192.0.2.1", "192.0.2.2"
PREFIX = 30  # a network of the two addresses alone
# TEST-NET-2: what stands for an address outside the machine (no route leads there).
OUTSIDE_ADDRESS = "198.51.100.7"
CLONE_NEWNET = 0x40000000  # <sched.h>
NETNS_DIR = Path("/run/netns")  # where `ip netns add` pins a namespace


@dataclass(frozen=True)
class Network:
    """A host's network as a process started there sees it: its namespace (a name under
    /run/netns) and the hosts file it resolves names with."""

    namespace: str
    hosts: Path

    def enter(self) -> list[str]:
        """The command prefix that runs a command in this network."""
        return ["nsenter", f"--net={NETNS_DIR / self.namespace}"]


@dataclass(frozen=True)
class Hosts:
    data: Network
    training: Network


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def can_network() -> str | None:
    """Why two network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "no ip or nsenter command (iproute2, util-linux)"
    name = f"ds-probe-{secrets.token_hex(4)}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns add refused: {probe.stderr.strip()}"
    _ip("netns", "delete", name)
    return None


@contextmanager
def two_hosts(folder: Path) -> Iterator[Hosts]:
    """The two namespaces and their link, the hosts file in `folder`; all gone afterwards."""
    suffix = secrets.token_hex(4)  # two tests at once get namespaces of their own
    data, training = f"ds-data-{suffix}", f"ds-train-{suffix}"
    made = []
    try:
        for name in (data, training):
            _ip("netns", "add", name)
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        # Made inside the data namespace, its peer moved straight to the training one: neither
        # end ever appears among the machine's own interfaces.
        _ip("-n", data, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
            "netns", training)  # fmt: skip
        for name, address in ((data, DATA_ADDRESS), (training, TRAINING_ADDRESS)):
            _ip("-n", name, "address", "add", f"{address}/{PREFIX}", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
        hosts = folder / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{DATA_ADDRESS} {DATA_HOST}\n")
        yield Hosts(Network(data, hosts), Network(training, hosts))
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextmanager
def inside(network: Network) -> Iterator[None]:
    """The calling thread in `network`, and the processes and threads it starts meanwhile; back
    in its own afterwards."""
    with open("/proc/thread-self/ns/net") as home, open(NETNS_DIR / network.namespace) as there:
        _setns(there.fileno())
        try:
            yield
        finally:
            _setns(home.fileno())
