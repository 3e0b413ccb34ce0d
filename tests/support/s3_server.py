"""A real S3-protocol server for the tests: moto's S3 app on loopback, in a subprocess.

The server runs in a subprocess (so client and server use both cores): moto's S3 WSGI
application behind a small HTTP/1.1 keep-alive bridge (werkzeug's development server
closes every connection) and a layer that (1) handles one request at a time, because
moto checks If-Match/If-None-Match and then writes without a lock, so two concurrent
conditional writes could both pass, which real S3 never allows; and (2) can inject
faults on request: error answers (503 SlowDown, 500), garbage bodies, "commit then
fail", or dropping the condition headers; (3) can delay a request (other requests go on
meanwhile), deliver it twice, or deliver a copy again after N more requests (a retry
that lands late), each on a share of the matching requests (``probability``, from a
seeded generator) so whole workloads can run under random faults. Stores reach it only
through ``S3Store``, the code path a user points at AWS or MinIO.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3

from cas_journal.backends.s3 import S3Store

PREFIX = "journal"

SERVER = r"""
import io, json, random, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote
from moto.moto_server.werkzeug_app import create_backend_app

moto = create_backend_app("s3")
lock = threading.Lock()
rules = []
replays = []  # [requests still to wait, environ, body] of late duplicates
chance = random.Random(0)

def reply(start_response, status, body, headers=()):
    start_response(status, [("Content-Length", str(len(body))), *headers])
    return [body]

def error(environ, start_response, status, code):
    body = b"" if environ["REQUEST_METHOD"] == "HEAD" else (
        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
        f"<Message>injected</Message><RequestId>t</RequestId></Error>"
    ).encode()
    return reply(start_response, status, body, [("Content-Type", "application/xml")])

def control(environ, start_response):
    global rules, chance
    if environ["REQUEST_METHOD"] == "PUT":
        rules = [dict(r, hits=0, injected=0) for r in json.loads(environ["wsgi.input"].read())]
        chance = random.Random(next((r["seed"] for r in rules if "seed" in r), 0))
        replays.clear()
    return reply(start_response, "200 OK", json.dumps(rules).encode())

def execute(environ, body):
    copy = dict(environ, **{"wsgi.input": io.BytesIO(body)})
    return b"".join(moto(copy, lambda *a, **k: None))

def matching(environ):
    for rule in rules:
        if rule.get("method", environ["REQUEST_METHOD"]) != environ["REQUEST_METHOD"]:
            continue
        if rule["path"] not in environ["PATH_INFO"]:
            continue
        if rule.get("query", "") not in environ["QUERY_STRING"]:
            continue
        rule["hits"] += 1
        if rule["injected"] >= rule.get("count", 1 << 30):
            return None
        if chance.random() >= rule.get("probability", 1.0):
            return None
        rule["injected"] += 1
        return rule
    return None

def app(environ, start_response):
    body = environ["wsgi.input"].read()
    environ["wsgi.input"] = io.BytesIO(body)
    with lock:
        path = environ["PATH_INFO"]
        if path.startswith("/__control__"):
            return control(environ, start_response)
        rule = matching(environ)
    if rule is not None and rule.get("delay"):
        time.sleep(rule["delay"])  # outside the lock: other requests go on meanwhile
    with lock:  # one request at a time: moto's condition checks are not atomic
        for late in list(replays):
            late[0] -= 1
            if late[0] <= 0:
                replays.remove(late)
                execute(late[1], late[2])
        environ["wsgi.input"] = io.BytesIO(body)
        if rule is not None and not rule.get("delay"):
            if rule.get("strip_conditions"):
                environ.pop("HTTP_IF_MATCH", None)
                environ.pop("HTTP_IF_NONE_MATCH", None)
            elif rule.get("after_commit"):
                execute(environ, body)
                return error(environ, start_response, "500 Internal Server Error", "InternalError")
            elif "duplicate" in rule:
                if rule["duplicate"] == "now":
                    execute(environ, body)  # delivered twice; the client sees the second answer
                else:  # a copy arrives again after N more requests (a stale retry landing late)
                    replays.append([int(rule.get("after", 1)), dict(environ), body])
            elif "body" in rule:
                return reply(start_response, "200 OK", bytes.fromhex(rule["body"]))
            else:
                return error(environ, start_response, rule["status"], rule["code"])
        environ["wsgi.input"] = io.BytesIO(body)
        return list(moto(environ, start_response))

class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keep-alive (werkzeug's dev server closes every connection)
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def handle_request(self):
        path, _, query = self.path.partition("?")
        size = int(self.headers.get("Content-Length") or 0)
        environ = {
            "REQUEST_METHOD": self.command, "SCRIPT_NAME": "", "QUERY_STRING": query,
            "PATH_INFO": unquote(path, "latin-1"), "RAW_URI": self.path,
            "REQUEST_URI": self.path, "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": str(self.server.server_address[1]), "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": str(size),
            "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
            "wsgi.input": io.BytesIO(self.rfile.read(size)), "wsgi.multithread": True,
            "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        for name, value in self.headers.items():
            key = name.upper().replace("-", "_")
            key = key if key == "CONTENT_TYPE" else "HTTP_" + key
            if key != "HTTP_CONTENT_LENGTH":
                environ[key] = f"{environ[key]},{value}" if key in environ else value
        answer = {}
        body = b"".join(app(environ, lambda status, headers, exc=None: answer.update(
            status=status, headers=headers)))
        code, _, reason = answer["status"].partition(" ")
        self.send_response_only(int(code), reason)
        length = str(len(body))
        for name, value in answer["headers"]:
            if name.lower() == "content-length":
                length = value  # HEAD: the length of the body it would have
            elif name.lower() not in ("connection", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_request

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@dataclass
class S3Server:
    """A running test server and the options that point a store at it."""

    endpoint: str
    process: subprocess.Popen[bytes]
    options: dict[str, Any] = field(default_factory=dict)
    _raw: Any = None

    def raw(self) -> Any:
        """A plain boto3 client (setup and sabotage only)."""
        if self._raw is None:
            self._raw = boto3.client("s3", **self.options)
        return self._raw

    def new_bucket(self) -> str:
        name = f"cas-{uuid.uuid4().hex[:24]}"
        self.raw().create_bucket(Bucket=name)
        return name

    def open(self, bucket: str, **options: Any) -> S3Store:
        return S3Store.from_url(f"s3://{bucket}/{PREFIX}", **{**self.options, **options})

    def faults(self, *rules: dict[str, Any]) -> list[dict[str, Any]]:
        """Install fault rules (replacing earlier ones); return the current rule states."""
        request = urllib.request.Request(
            f"{self.endpoint}/__control__", data=json.dumps(list(rules)).encode(), method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            result: list[dict[str, Any]] = json.loads(response.read())
        return result

    def rule_states(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.endpoint}/__control__", timeout=10) as response:
            result: list[dict[str, Any]] = json.loads(response.read())
        return result


@contextlib.contextmanager
def running_server() -> Iterator[S3Server]:
    """Start the server, yield it, stop it."""
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, stderr=errors
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.strip().isdigit():
                errors.seek(0)
                raise RuntimeError(f"the moto test server did not start: {errors.read()[-2000:]!r}")
            endpoint = f"http://127.0.0.1:{int(line)}"
            options = {
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "aws_access_key_id": "testing",
                "aws_secret_access_key": "testing",
            }
            yield S3Server(endpoint, process, options)
        finally:
            process.terminate()
            process.wait(timeout=10)
