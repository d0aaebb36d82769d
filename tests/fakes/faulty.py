"""A forwarding HTTP proxy that answers chosen requests with a cloud's error instead.

Put it between a real client library and a real server (moto_server) to see how the provider
copes with throttling and capacity errors the server itself never produces. A rule is a
predicate on (method, path, body) and the response to give; `times` bounds how often it fires.
A rewrite edits the server's real response (say, to show instances still booting).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

EC2_ERROR = ('<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
             '<Message>{message}</Message></Error></Errors><RequestID>faulty-proxy</RequestID></Response>')


@dataclass
class Rule:
    matches: object  # (method, path, body: str) -> bool
    status: int
    body: str
    times: int | None = None  # None: every time
    fired: int = 0


def ec2_error(code: str, status: int = 400, *, when=None, times: int | None = None, message: str = "injected by the test proxy") -> Rule:
    """An EC2 Query API error for requests whose form body contains every string in `when`."""
    words = when or []
    return Rule(lambda m, p, b: all(w in b for w in words), status, EC2_ERROR.format(code=code, message=message), times)


class FaultyProxy:
    def __init__(self, upstream: str):
        self.upstream, self.rules, self.seen = upstream.rstrip("/"), [], []
        self.rewrites: list = []  # (predicate on the request body, bytes -> bytes on the response)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, body = proxy.handle(self.command, self.path, raw, dict(self.headers))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def handle(self, method: str, path: str, raw: bytes, headers: dict) -> tuple[int, dict, bytes]:
        text = raw.decode(errors="replace")
        with self._lock:
            self.seen.append(text)
            for rule in self.rules:
                if (rule.times is None or rule.fired < rule.times) and rule.matches(method, path, text):
                    rule.fired += 1
                    return rule.status, {"Content-Type": "text/xml"}, rule.body.encode()
        fwd = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        resp = requests.request(method, self.upstream + path, data=raw, headers=fwd, timeout=60)
        keep = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "x-amzn-requestid")}
        content = resp.content
        for matches, rewrite in list(self.rewrites):
            if matches(text):
                content = rewrite(content)
        return resp.status_code, keep, content

    def close(self) -> None:
        self.server.shutdown()
