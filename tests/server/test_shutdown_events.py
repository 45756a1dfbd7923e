"""The Events of the last second before SIGTERM reach the API server (issue #63, finding 6).

uvicorn raises SIGTERM again once it has drained, and the default action ends the process:
code after uvicorn's run() never ran, so the recorder's last flush was lost with the Events
queued since the previous one (flushes are a second apart)."""

from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path

import pytest

from tests.server.conftest import start_server
from tests.server.test_events_flood import Handler, StandIn, training_pod
from tests.server.test_server import post, review

pytestmark = pytest.mark.server

JOBS = 5


class ManyJobs(Handler):
    """Every JobSet `js-N` exists, with uid `uid-N` (as training_pod(namespace, N) labels it)."""

    def do_GET(self) -> None:
        job = re.fullmatch(
            r"/apis/jobset.x-k8s.io/v1alpha2/namespaces/([^/]+)/jobsets/js-(\d+)", self.path.split("?")[0]
        )
        if job is None:
            super().do_GET()
            return
        self._answer(200, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                           "metadata": {"name": f"js-{job.group(2)}", "namespace": job.group(1),
                                        "uid": f"uid-{int(job.group(2)):06d}"}})  # fmt: skip


def test_events_queued_just_before_sigterm_are_sent(tmp_path: Path) -> None:
    api = StandIn()
    api.RequestHandlerClass = ManyJobs
    api.black_hole.clear()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    server = start_server(tmp_path, poll_seconds=None, args=("--kubeconfig", str(kubeconfig)))
    try:
        with server.client() as c:
            for i in range(JOBS):
                pod = training_pod("ml", i, big=False)
                pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] = f"js-{i}"
                r = post(c, review(pod, uid=f"last-{i}"))
                assert r.status_code == 200 and r.json()["response"].get("patch"), r.text
        sent_before = len(api.events)
        server.proc.send_signal(signal.SIGTERM)  # well within the second between two flushes
        code = server.proc.wait(timeout=30)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        api.shutdown()
    injected = {body["regarding"]["uid"] for verb, ns, body in api.events if verb == "create" and ns == "ml"
                and body.get("reason") == "Injected"}  # fmt: skip
    print(f"\nEvents sent before SIGTERM: {sent_before}, after: {len(api.events) - sent_before}; exit {code}")
    assert injected == {f"uid-{i:06d}" for i in range(JOBS)}, (injected, server.log.read_text()[-2000:])
    assert code in (0, -signal.SIGTERM)
