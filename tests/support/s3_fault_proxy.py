"""A fault-injecting HTTP proxy for the S3 protocol, for the tests.

``FaultProxy(upstream)`` listens on loopback and forwards every request it receives
(method, path, query, headers, body) to ``upstream`` (the moto server of
``tests/support/s3_server.py``), streaming the answer back. Clients reach it exactly as they
reach AWS S3 or MinIO: an ``S3Store`` whose ``endpoint_url`` is ``proxy.endpoint``.

Between the two it applies ``FaultRule``s. A rule matches requests by method and by a
regular expression searched in the request's path (``/<bucket>/<key>``; path-style
addressing, which botocore uses for an IP endpoint) and query, and fires on a share
``rate`` of them, at most ``limit`` times. The first rule that matches and fires decides
what happens to a request; a request no rule fires on is forwarded untouched. Faults:

* ``error``: answer an S3 error (``status``/``code``, 503 SlowDown by default) without
  forwarding: the request never happened.
* ``reset``: reset the connection (TCP RST) without forwarding.
* ``error_after``: forward, read the real answer, then answer an error instead: the
  request happened but the client sees a failure (its retry of a conditional write then
  meets its own write: 412).
* ``reset_after``: the same with a connection reset instead of the error answer.
* ``truncate``: forward, then stream only half of the answer's body and reset.
* ``delay``: wait ``delay`` seconds, then forward (other requests go on meanwhile).
* ``duplicate``: forward the request twice, one copy right after the other; the client
  sees the second answer (``answer="second"``, e.g. a 412 for a conditional write that
  the first copy made) or the first (``answer="first"``: the copy lands after the answer).

Whether a rule fires is a pure function of the seed, the rule's position, the method,
the path and how many times this method and path have been seen: the same requests get
the same faults whatever the thread interleaving (a retry is a new occurrence, so it
gets a new draw). ``events`` records every fault injected, ``forwarded`` counts the
requests that reached the upstream server.
"""

from __future__ import annotations

import hashlib
import http.client
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlsplit

Fault = Literal["error", "reset", "error_after", "reset_after", "truncate", "delay", "duplicate"]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "content-length",
    }
)
"""Headers that describe one hop, not the request: never forwarded as they are."""
CHUNK = 64 * 1024


@dataclass(frozen=True)
class FaultRule:
    """Which requests get which fault (see the module docstring)."""

    fault: Fault
    methods: frozenset[str] = frozenset()
    """Methods it applies to (empty: every method)."""
    path: str = ""
    """Regular expression searched in ``/<bucket>/<key>`` ("" matches every path)."""
    query: str = ""
    """Regular expression searched in the query string ("" matches every query)."""
    rate: float = 1.0
    """Share of the matching requests it fires on."""
    limit: int | None = None
    """At most this many injections (None: no limit)."""
    status: int = 503
    code: str = "SlowDown"
    delay: float = 0.05
    answer: Literal["first", "second"] = "second"

    def matches(self, method: str, path: str, query: str) -> bool:
        """True if the rule applies to this request (before its rate and limit)."""
        if self.methods and method not in self.methods:
            return False
        if self.path and re.search(self.path, path) is None:
            return False
        return not self.query or re.search(self.query, query) is not None


def rule(fault: Fault, *methods: str, **settings: object) -> FaultRule:
    """Shorthand: ``rule("error_after", "PUT", path="/refs/", rate=0.3)``."""
    return FaultRule(fault, frozenset(methods), **settings)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Event:
    """One injected fault."""

    fault: Fault
    method: str
    path: str
    query: str


class FaultProxy:
    """The proxy; use as a context manager or call ``start`` and ``close``."""

    def __init__(self, upstream: str, seed: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.seed = seed
        self.rules: tuple[FaultRule, ...] = ()
        self.events: list[Event] = []
        self.forwarded = 0
        self._seen: Counter[tuple[str, str, str]] = Counter()
        self._fired: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the endpoint_url clients use."""
        assert self._server is not None, "start the proxy first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def set_rules(self, *rules: FaultRule, seed: int | None = None) -> None:
        """Replace the rules (none: forward everything) and reset draws and counters."""
        with self._lock:
            self.rules = rules
            if seed is not None:
                self.seed = seed
            self.events = []
            self.forwarded = 0
            self._seen.clear()
            self._fired.clear()

    def injected(self, fault: Fault | None = None) -> int:
        """How many faults (of one kind, or of any) were injected since ``set_rules``."""
        with self._lock:
            return sum(1 for event in self.events if fault is None or event.fault == fault)

    def start(self) -> FaultProxy:
        """Listen on a free loopback port and serve on a daemon thread."""
        proxy = self

        class Handler(ProxyHandler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving (open client connections are dropped)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- decisions ----------------------------------------------------------------------

    def decide(self, method: str, path: str, query: str) -> FaultRule | None:
        """The rule that fires on this request, if any (records the event)."""
        with self._lock:
            occurrence = self._seen[(method, path, query)]
            self._seen[(method, path, query)] += 1
            for index, candidate in enumerate(self.rules):
                if not candidate.matches(method, path, query):
                    continue
                if candidate.limit is not None and self._fired[index] >= candidate.limit:
                    continue
                if _draw(self.seed, index, method, path, query, occurrence) >= candidate.rate:
                    continue
                self._fired[index] += 1
                self.events.append(Event(candidate.fault, method, path, query))
                return candidate
            return None

    def count_forwarded(self) -> None:
        with self._lock:
            self.forwarded += 1


def _draw(seed: int, index: int, method: str, path: str, query: str, occurrence: int) -> float:
    """A number in [0, 1) fixed by its arguments."""
    text = f"{seed}\0{index}\0{method}\0{path}\0{query}\0{occurrence}".encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass
class Answer:
    """An upstream answer: status line, headers and (for buffered answers) the body."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    response: http.client.HTTPResponse


class ProxyHandler(BaseHTTPRequestHandler):
    """Handles one client connection (HTTP/1.1 keep-alive), with its own upstream one."""

    owner: FaultProxy
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._upstream is not None:
                self._upstream.close()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def handle_request(self) -> None:
        body = self._read_body()
        path, _, query = self.path.partition("?")
        chosen = self.owner.decide(self.command, path, query)
        fault = chosen.fault if chosen is not None else None
        if chosen is not None and fault == "error":
            self._send_error(chosen)
            return
        if fault == "reset":
            self._reset()
            return
        if chosen is not None and fault == "delay":
            time.sleep(chosen.delay)
        if chosen is not None and fault == "duplicate":
            if chosen.answer == "first":
                first = self._forward(body)
                kept = first.response.read()
                self._forward(body).response.read()
                self._send_buffered(first, kept)
                return
            self._forward(body).response.read()
        answer = self._forward(body)
        if chosen is not None and fault in ("error_after", "reset_after"):
            answer.response.read()
            if fault == "reset_after":
                self._reset()
            else:
                self._send_error(chosen)
            return
        self._stream(answer, truncate=fault == "truncate")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_request

    # -- upstream -----------------------------------------------------------------------

    def _forward(self, body: bytes) -> Answer:
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
        if body or self.command in ("PUT", "POST"):
            headers.append(("Content-Length", str(len(body))))
        for attempt in (1, 2):
            fresh = self._upstream is None
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(*self.owner.upstream, timeout=60)
            connection = self._upstream
            try:
                connection.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in headers:
                    connection.putheader(name, value)
                connection.endheaders(body)
                response = connection.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # a kept-alive upstream connection closed while idle: reopen it once
                connection.close()
                self._upstream = None
                if fresh or attempt == 2:
                    raise
                continue
            self.owner.count_forwarded()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
            length = response.getheader("Content-Length")
            if length is not None:
                kept.append(("Content-Length", length))
            return Answer(response.status, response.reason, kept, response)
        raise AssertionError("unreachable")

    # -- answers to the client ----------------------------------------------------------

    def _send_head(self, answer: Answer, chunked: bool) -> None:
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.headers:
            self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _stream(self, answer: Answer, truncate: bool) -> None:
        response = answer.response
        length = response.getheader("Content-Length")
        chunked = length is None and self.command != "HEAD" and response.status not in (204, 304)
        self._send_head(answer, chunked)
        if self.command == "HEAD":
            response.read()
            return
        budget = int(length) // 2 if truncate and length is not None else None
        sent = 0
        for block in _blocks(response):
            if budget is not None and sent + len(block) > budget:
                self.wfile.write(block[: budget - sent])
                self.wfile.flush()
                self._reset()
                response.read()
                return
            sent += len(block)
            if chunked:
                self.wfile.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
            else:
                self.wfile.write(block)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        if budget is not None:  # an empty body cannot be cut short: reset after it
            self._reset()

    def _send_buffered(self, answer: Answer, body: bytes) -> None:
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.headers:
            if name.lower() != "content-length":
                self.send_header(name, value)
        declared = answer.response.getheader("Content-Length")  # HEAD: the GET's length
        self.send_header("Content-Length", declared if declared is not None else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_error(self, chosen: FaultRule) -> None:
        body = b""
        if self.command != "HEAD":
            body = (
                "<?xml version='1.0' encoding='UTF-8'?><Error>"
                f"<Code>{chosen.code}</Code><Message>injected by the fault proxy</Message>"
                "<RequestId>fault-proxy</RequestId></Error>"
            ).encode()
        self.send_response_only(chosen.status, http.client.responses.get(chosen.status, ""))
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _reset(self) -> None:
        """Drop the client connection with a TCP reset (no answer, or half of one)."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass


def _blocks(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while True:
        block = response.read(CHUNK)  # read, not read1: it closes the answer at its end
        if not block:
            return
        yield block
