"""Small HTTPS admission endpoints for the failure and reinvocation tests."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from app.webhook import tls


class FakeWebhook:
    """Serves POST /mutate with `respond(request) -> list of JSON Patch ops`, after `delay` s."""

    def __init__(self, workdir: Path, respond: Any = None, delay: float = 0.0) -> None:
        self.ca = tls.make_ca("fake-ca")
        pair = tls.make_serving(self.ca, ["127.0.0.1"])
        tls.write_dir(workdir, pair, self.ca)
        self.calls: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.calls.append(body["request"])
                time.sleep(outer.delay)
                ops = respond(body["request"]) if respond else []
                resp: dict[str, Any] = {"uid": body["request"]["uid"], "allowed": True}
                if ops:
                    resp["patchType"] = "JSONPatch"
                    resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
                data = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data.encode())
                except (ssl.SSLError, OSError):
                    pass  # the API server gave up on us (the slow case): expected

            def log_message(self, *args: Any) -> None:
                pass

        self.delay = delay
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(workdir / tls.CERT_FILE), str(workdir / tls.KEY_FILE))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/mutate"

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem).decode()

    def close(self) -> None:
        self.httpd.shutdown()
