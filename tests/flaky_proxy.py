"""A bucket that fails requests: an HTTP proxy on 127.0.0.1 in front of the local Google
Cloud Storage (tests/gcs_emulator.py) that answers some requests itself, by a seeded
schedule, instead of forwarding them:

* ``503``: 503 Service Unavailable, as Cloud Storage answers when it is overloaded;
* ``429``: 429 Too Many Requests, its answer to a client over its rate;
* ``reset``: the connection reset (RST) in place of the answer; the request never reaches
  the bucket, so retrying it changes nothing twice. gcsfs's uploads (POST, PATCH) are reset
  before any byte of a response; every other request after the response's status line and
  headers (a 200 announcing a body), in the middle of the response. A reset before any
  response byte on a reused connection is re-sent once by the HTTP library itself, unseen
  by the client that counts retries: by aiohttp (gcsfs's) for a method it deems idempotent
  (GET, HEAD, PUT, DELETE...), by curl (TensorStore's) for any. And a gcsfs upload reset in
  the middle of its response crashes CPython 3.12.1 (docs/faults.md, "A reset connection").
* ``delay``: the request forwarded after ``delay_s`` seconds (not a failure);
* ``hold``: the request read whole and never answered, its connection held open (a bucket
  that stopped answering: a write that stalls) until :meth:`Proxy.heal` or ``hold_s``
  seconds, then reset without an answer.

Which requests: ``every``-th request (1, 2, ... counted as they arrive), or each with
probability ``fraction`` drawn from ``random.Random(seed)``, the kind drawn from ``kinds``
by the same generator; the first request whose path holds each text of ``fail_first``
(the failures of ``kinds`` in turn), so that each path a run writes meets a failure;
every request from request ``fail_from`` on (kind ``503``),
which :meth:`Proxy.fail_after` sets once a request whose path holds a given text was
answered; and every request whose path holds a text of ``hold`` (kind ``hold``).
:meth:`Proxy.heal` ends every failure and lets the held connections go. ``counts`` says
what the proxy did, by kind and by client (its User-Agent: gcsfs or TensorStore).
"""

from __future__ import annotations

import collections
import http.client
import http.server
import random
import socket
import socketserver
import struct
import sys
import threading
import time
from typing import Any

FAILURES = ("503", "429", "reset")
UPLOADS = ("POST", "PATCH")  # the methods aiohttp does not re-send itself
KINDS = (*FAILURES, "delay", "hold")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-connection", "content-length"}


def client_of(user_agent: str) -> str:
    """Which library sent a request, from its User-Agent."""
    agent = user_agent.lower()
    return "tensorstore" if "tensorstore" in agent else "gcsfs" if "gcsfs" in agent else "other"


class Proxy:
    """The proxy on a free port of 127.0.0.1, forwarding to ``upstream``
    (``http://127.0.0.1:PORT``), one thread a connection."""

    def __init__(self, upstream: str, seed: int = 0, every: int | None = None,
                 fraction: float = 0.0, kinds: tuple[str, ...] = FAILURES,
                 fail_from: int | None = None, delay_s: float = 0.5,
                 fail_first: tuple[str, ...] = (), hold: tuple[str, ...] = (),
                 hold_s: float = 600.0):
        assert set(kinds) <= set(KINDS), kinds
        self.upstream = upstream.removeprefix("http://")
        self.every, self.fraction, self.kinds = every, fraction, kinds
        self.fail_from, self.delay_s = fail_from, delay_s
        self.fail_first = list(fail_first)
        self.hold, self.hold_s = tuple(hold), hold_s
        self.healed = threading.Event()  # set by heal(): the held connections let go
        self.held_since: float | None = None  # time.monotonic() of the first held request
        self.failing_since: float | None = None  # time.monotonic() when fail_from began
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.requests = 0  # requests received
        self.counts: collections.Counter = collections.Counter()  # (kind, client) -> n
        self.log: list[tuple[int, str, str, str]] = []  # (n, method, path, what was done)
        self._trigger: str | None = None
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # persistent connections, as the clients use

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _any  # noqa: N815

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that closed its connection while answered (a run that ended with
                # requests in flight) is no error of the proxy's.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # The schedule.

    def fail_after(self, path_text: str) -> None:
        """Every request after the first one whose path holds ``path_text`` fails (503)."""
        with self.lock:
            self._trigger = path_text

    def heal(self) -> None:
        """No request fails or is held from now on; those held are let go (reset)."""
        with self.lock:
            self.every, self.fraction, self.fail_from, self._trigger = None, 0.0, None, None
            self.fail_first = []
            self.hold = ()
        self.healed.set()

    def failed(self, client: str | None = None) -> int:
        """Requests answered with a failure (503, 429 or a reset), of ``client`` or all."""
        return sum(n for (kind, who), n in self.counts.items()
                   if kind in FAILURES and client in (None, who))

    def _decide(self, method: str, path: str, client: str) -> tuple[int, str]:
        with self.lock:
            self.requests += 1
            n = self.requests
            kind = "forward"
            first = next((t for t in self.fail_first if t in path), None)
            if any(t in path for t in self.hold):
                kind = "hold"
                if self.held_since is None:
                    self.held_since = time.monotonic()
            elif self.fail_from is not None and n >= self.fail_from:
                kind = "503"
            elif first is not None:
                self.fail_first.remove(first)
                failures = [k for k in self.kinds if k in FAILURES]
                kind = failures[len(self.log) % len(failures)]
            elif ((self.every and n % self.every == 0)
                  or (self.fraction and self.random.random() < self.fraction)):
                kind = self.random.choice(self.kinds)
            self.counts[kind, client] += 1
            self.log.append((n, method, path, kind))
            return n, kind

    def _answered(self, path: str, n: int) -> None:
        with self.lock:
            if self._trigger is not None and self._trigger in path:
                self.fail_from, self._trigger = n + 1, None
                self.failing_since = time.monotonic()

    # One request.

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        body = _read_body(handler)
        client = client_of(handler.headers.get("User-Agent", ""))
        n, kind = self._decide(handler.command, handler.path, client)
        if kind in ("503", "429"):
            text = b'{"error": {"code": %s, "message": "injected by the test proxy"}}' % (
                kind.encode())
            handler.send_response(int(kind))
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(text)))
            handler.end_headers()
            handler.wfile.write(text)
            return
        if kind == "reset":
            if client != "gcsfs" or handler.command not in UPLOADS:
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", "1000")
                handler.end_headers()
                handler.wfile.flush()
            _reset(handler)
            return
        if kind == "hold":
            # Read whole, never answered: the client waits for an answer that does not come
            # (its own timeouts aside) until the proxy is healed.
            self.healed.wait(self.hold_s)
            _reset(handler)
            return
        if kind == "delay":
            time.sleep(self.delay_s)
        status, reason, headers, content = self._forward(handler, body)
        handler.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(content)
        self._answered(handler.path, n)

    def _forward(self, handler: http.server.BaseHTTPRequestHandler, body: bytes
                 ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in handler.headers.items()
                       if k.lower() not in _HOP_BY_HOP and k.lower() != "expect"}
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            content = response.read()
            return response.status, response.reason, response.getheaders(), content
        finally:
            connection.close()

    def stop(self) -> None:
        self.healed.set()
        self.server.shutdown()
        self.server.server_close()


def _reset(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Closes the request's connection with an RST (SO_LINGER 0) instead of a FIN."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True
    handler.connection.close()


def _read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    """The request's body, whole: by Content-Length, or chunks."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""
