"""The Python floor: uvicorn (httptools, the event loop our server runs) over TLS answering a fixed response.

What hostnet-rdma's HTTP stack costs before any admission work: the gap between this and
the Go floor is the language runtime, not our code. Usage: pyfloor.py PORT CERT KEY [LOOP]
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

FIXED = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"fixed","allowed":true}}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(FIXED)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": FIXED})


if __name__ == "__main__":
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    loop = sys.argv[4] if len(sys.argv) > 4 else "auto"
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_level="warning",
        access_log=False,
        loop=loop,
    )
