"""Real redis-server processes for the tests: each on a free loopback port (or
only a unix socket, or only a TLS port), in a temporary directory of its own,
stopped through its process handle. THROTTLE_MODULE
names the built module (default: the repository's
target/release/libredis_throttle.so); THROTTLE_REDIS_SERVER the server
binary (default: redis-server on PATH)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

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


def server_binary() -> str:
    return os.environ.get("THROTTLE_REDIS_SERVER", "redis-server")


def server_name() -> str:
    """The server under test as the test ids and skips name it: its binary's directory, or the binary."""
    binary = server_binary()
    parent = os.path.basename(os.path.dirname(binary))
    return parent or binary


class TLSUnsupported(RuntimeError):
    """The server binary was built without TLS."""


class Certificates:
    """A test CA, a server certificate for 127.0.0.1 and localhost, and a client
    certificate, made with the openssl command-line tool in a temporary directory."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="throttle-tls-")
        self.ca, self.ca_key = self._path("ca.crt"), self._path("ca.key")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self._openssl("req", "-x509", *ec, "-keyout", self.ca_key, "-out", self.ca, "-days", "2",
                      "-subj", "/CN=redis-throttle test CA",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self.server, self.server_key = self._sign("server", "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self.client, self.client_key = self._sign("client", "extendedKeyUsage=clientAuth")

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def _sign(self, name: str, extension: str) -> Tuple[str, str]:
        crt, key, csr, ext = (self._path(f"{name}.{suffix}") for suffix in ("crt", "key", "csr", "ext"))
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", key, "-out", csr, "-subj", f"/CN=redis-throttle test {name}")
        with open(ext, "w") as f:
            f.write(f"{extension}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                      "-out", crt, "-days", "2", "-extfile", ext)
        return crt, key

    def client_options(self) -> Dict[str, Any]:
        """redis-py's TLS arguments: the test CA, and the client certificate the server asks for."""
        return {"ssl": True, "ssl_ca_certs": self.ca, "ssl_certfile": self.client, "ssl_keyfile": self.client_key}

    def query(self) -> str:
        """The same as a URL query, as limits' rediss:// URIs take them."""
        return f"ssl_ca_certs={self.ca}&ssl_certfile={self.client}&ssl_keyfile={self.client_key}"

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer:
    """One server with the module (unless module=False). By default it listens
    on a loopback TCP port; with tls=Certificates only on a TLS port; with
    unix=True only on a unix socket in its directory."""

    def __init__(self, module: bool = True, extra: Optional[List[str]] = None,
                 tls: Optional[Certificates] = None, unix: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="throttle-python-")
        self.tls, self.socket = tls, (os.path.join(self.dir, "redis.sock") if unix else None)
        binary = server_binary()
        for attempt in range(5):
            self.port = free_port()
            args = [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log")]
            if tls:
                args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", tls.server,
                         "--tls-key-file", tls.server_key, "--tls-ca-cert-file", tls.ca]
            elif self.socket:
                args += ["--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "700"]
            else:
                args += ["--port", str(self.port)]
            if module:
                args += ["--loadmodule", module_path()]
            self.process = subprocess.Popen(args + (extra or []), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._ready():
                return
            self.process.kill()
            self.process.wait()
            log = self.log()
            if tls and "TLS support" in log:  # "Failed finding TLS support."
                shutil.rmtree(self.dir, ignore_errors=True)
                raise TLSUnsupported(f"{binary} is built without TLS ({log.strip().splitlines()[-1].split('# ')[-1]})")
        raise RuntimeError("redis-server did not start:\n" + self.log())

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "redis.log")) as log:
                return log.read()
        except OSError:
            return ""

    def _ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with self.client(socket_timeout=1) as client:
                    # this server's own process, not another one that took the port meanwhile (the
                    # suites of several servers run at once)
                    return int(client.info("server")["process_id"]) == self.process.pid
            except redis.ConnectionError:
                time.sleep(0.01)
        return False

    @property
    def url(self) -> str:
        """host:port, as the storage URIs take it (a TCP or TLS server)."""
        return f"127.0.0.1:{self.port}"

    def connection(self) -> Dict[str, Any]:
        """redis-py's arguments for this server."""
        if self.socket:
            return {"unix_socket_path": self.socket}
        return {"host": "127.0.0.1", "port": self.port, **(self.tls.client_options() if self.tls else {})}

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis(**{**self.connection(), **options})

    def stop(self) -> None:
        """SIGTERM to the child (the server shuts down as on SHUTDOWN: it saves nothing here), then SIGKILL if
        it outlasts 10 s. Not SHUTDOWN through a client: redis-py retries the closed connection for seconds."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three masters on loopback, each serving a third of the slots."""

    def __init__(self, tls: Optional[Certificates] = None) -> None:
        self.tls = tls
        options = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"]
        if tls:  # the cluster bus and the addresses CLUSTER SLOTS gives out are TLS too
            options += ["--tls-cluster", "yes"]
        self.nodes: List[RedisServer] = []
        try:
            for _ in range(3):
                self.nodes.append(RedisServer(extra=options, tls=tls))
            ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
            for node, (first, last) in zip(self.nodes, ranges):
                with node.client() as client:
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            with self.nodes[0].client() as first_node:
                for node in self.nodes[1:]:
                    first_node.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
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
        with node.client() as client:
            info = client.cluster("info")
        return info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == 3

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def client(self, **options) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port,
                                          **{**(self.tls.client_options() if self.tls else {}), **options})

    def flush(self) -> None:
        for node in self.nodes:
            with node.client() as client:
                client.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
