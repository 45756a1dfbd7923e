"""The Python floors: uvicorn (httptools, the event loop our server runs) over TLS answering a fixed response.

What hostnet-rdma's HTTP stack costs before any admission work: the gap between this and
the Go floor is the language runtime, not our code. Usage: pyfloor.py PORT CERT KEY [LOOP] [MODE]

MODE `asgi` (the default): through uvicorn's ASGI cycle (a scope, a task, receive and send
messages a request), as every ASGI app pays. MODE `protocol`: answered by uvicorn's protocol
itself once the request is read, with no ASGI cycle: the floor of hostnet-rdma's direct path
(app/webhook/protocol.py, `Direct`).
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

FIXED = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"fixed","allowed":true}}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(FIXED)).encode())]
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(FIXED), FIXED)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": FIXED})


class FixedProtocol(HttpToolsProtocol):
    """uvicorn's parser and transport, the fixed response written when the request is read."""

    def on_message_begin(self) -> None:
        self.url, self.headers = b"", []
        self.body: list[bytes] = []

    def on_headers_complete(self) -> None:
        pass

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        b"".join(self.body)
        self.transport.write(RESPONSE)


if __name__ == "__main__":
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    loop = sys.argv[4] if len(sys.argv) > 4 else "auto"
    protocol = len(sys.argv) > 5 and sys.argv[5] == "protocol"
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_level="warning",
        access_log=False,
        loop=loop,
        **({"http": FixedProtocol, "lifespan": "off"} if protocol else {}),  # type: ignore[arg-type]
    )
