"""A minimal RESP2 client on the standard library, shared by bench/e2e.py
and scripts/plot_algorithms.py (both run on a bare python3)."""

import socket


def encode(args):
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    """One reply from the buffered reader `f`; an error reply raises."""
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise RuntimeError(f"unexpected reply {line!r}")


class Client:
    """One connection to 127.0.0.1:`port`."""

    def __init__(self, port, timeout=600):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def call(self, *args):
        self.sock.sendall(encode(args))
        return read_reply(self.file)

    def info(self, section):
        fields = {}
        for line in self.call("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields[k] = v
        return fields


def pipeline(port, commands):
    """Sends `commands` at once on a new connection; returns their replies."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"".join(encode(c) for c in commands))
        f = s.makefile("rb")
        return [read_reply(f) for _ in commands]


def free_port():
    """A free loopback port, never 6379."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port
