"""A threaded local HTTP server for the fakes, on a free port of 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class JsonHandler(BaseHTTPRequestHandler):
    """Routes METHOD + path to `self.server.app.handle(method, path, query, body, headers)`."""

    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        status, payload = self.server.app.handle(self.command, url.path, {k: v[0] for k, v in parse_qs(url.query).items()}, body, self.headers)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, *args) -> None:  # quiet
        pass


def serve(app) -> tuple[ThreadingHTTPServer, str]:
    """Start `app` on a free port; returns the server (call `shutdown()`) and its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), JsonHandler)
    server.daemon_threads = True
    server.app = app
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
