"""Real redis-server processes for the tests: each on a free loopback port, in
a temporary directory of its own, stopped with SHUTDOWN NOSAVE and then by its
process handle. THROTTLE_MODULE names the built module (default: the
repository's target/release/libredis_throttle.so); THROTTLE_REDIS_SERVER
the server binary (default: redis-server on PATH)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

import redis


def module_path() -> str:
    default = os.path.join(os.path.dirname(__file__), "..", "..", "..", "target", "release", "libredis_throttle.so")
    path = os.environ.get("THROTTLE_MODULE") or default
    if not path or not os.path.isfile(path):
        raise RuntimeError(f"THROTTLE_MODULE must name the built module (libredis_throttle.so); got {path!r}")
    return os.path.abspath(path)


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


class RedisServer:
    def __init__(self, module: bool = True, extra: Optional[List[str]] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="throttle-python-")
        binary = os.environ.get("THROTTLE_REDIS_SERVER", "redis-server")
        for attempt in range(5):
            self.port = free_port()
            args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log")]
            if module:
                args += ["--loadmodule", module_path()]
            self.process = subprocess.Popen(args + (extra or []), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._ready():
                return
            self.process.kill()
            self.process.wait()
        with open(os.path.join(self.dir, "redis.log")) as log:
            raise RuntimeError("redis-server did not start:\n" + log.read())

    def _ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return True
            except redis.ConnectionError:
                time.sleep(0.01)
        return False

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, **options) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.client(socket_timeout=2).shutdown(nosave=True)
            except redis.RedisError:
                pass  # the connection closes as the server exits
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three masters on loopback, each serving a third of the slots."""

    def __init__(self) -> None:
        self.nodes = [RedisServer(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "5000"]) for _ in range(3)]
        try:
            ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
            for node, (first, last) in zip(self.nodes, ranges):
                node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            for node in self.nodes[1:]:
                self.nodes[0].client().execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
            deadline = time.monotonic() + 30
            while not all(self._ok(node) for node in self.nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not reach cluster_state:ok")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _ok(node: RedisServer) -> bool:
        info = node.client().cluster("info")
        return info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == 3

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def client(self, **options) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **options)

    def flush(self) -> None:
        for node in self.nodes:
            node.client().flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
