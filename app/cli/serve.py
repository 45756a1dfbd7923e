"""`hostnet-rdma serve`: the admission webhook, uvicorn over TLS with a hot-reloading certificate,
optionally managing its own certificates in a Secret (--self-managed-certs)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core import ConfigError
from app.webhook import tls
from app.webhook.settings import ServerSettings

if TYPE_CHECKING:  # the server's modules load only for `serve`, not for every command
    from app.webhook.server import ConfigHolder

DEV_CERT_DIR = Path("dev-certs")


def configure_logging(level: str) -> None:
    from app.webhook.server import JsonLogFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger("hostnet_rdma")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.webhook.server import ConfigHolder, create_app

    overrides: dict[str, Any] = {
        k: v
        for k, v in {"host": args.host, "port": args.port, "cert_dir": args.cert_dir, "config": args.config}.items()
        if v is not None
    }
    settings = ServerSettings(**overrides)
    if args.dev:
        settings.cert_dir = tls.dev_certs(Path(args.cert_dir) if args.cert_dir else DEV_CERT_DIR)
        if args.host is None:
            settings.host = "127.0.0.1"
    configure_logging(settings.log_level)
    log = logging.getLogger("hostnet_rdma.server")
    certs_keeper = None
    if args.self_managed_certs:
        certs_keeper = _self_managed(args, settings)
        if isinstance(certs_keeper, int):
            return certs_keeper
    try:
        holder = ConfigHolder(settings.config, settings.poll_seconds)
    except ConfigError as e:
        print(f"hostnet-rdma: error: {e}", file=sys.stderr)
        return 2
    try:
        # Self-managed: a reloaded certificate must also name the Service the API server calls.
        names: tuple[str, ...] = ()
        if args.self_managed_certs:
            namespace = args.namespace or os.environ.get("POD_NAMESPACE", "")
            names = tuple(tls.service_names(args.service, namespace, holder.config.cluster_domain) + args.extra_san)
        cert = tls.ReloadingCert(settings.cert_dir, settings.poll_seconds, names)
    except (OSError, ValueError) as e:
        print(
            f"hostnet-rdma: error: cannot load {settings.cert_dir}/{tls.CERT_FILE} and {tls.KEY_FILE}: {e}. "
            "Mount the serving Secret there, or use --dev for a local self-signed pair.",
            file=sys.stderr,
        )
        return 2

    recorder = _recorder(args, settings, log, holder)
    background = Background(cert, holder, certs_keeper, args.cert_check_seconds, recorder)
    app = create_app(settings, holder, cert_expiry=lambda: cert.expiry.timestamp(),
                     cert_refused=lambda: cert.refused, on_startup=background.start, recorder=recorder)  # fmt: skip

    from app.webhook.connections import ConnectionBudget, tls_factory
    from app.webhook.protocol import EVENT_LOOP, bounded_protocol, malloc_trim

    # TLS is ours, not uvicorn's: each accepted socket is counted before its handshake, with small
    # buffers, and gets the serving context as it is at that moment (connections.py).
    budget = ConnectionBudget(settings.max_connections, settings.max_handshakes, trim=malloc_trim())
    # Reviews are read and answered by the protocol itself where they can be (protocol.Direct).
    http = bounded_protocol(settings.request_timeout_seconds, settings.max_header_bytes,
                            settings.max_held_body_bytes, direct=app.admission)  # fmt: skip
    config = uvicorn.Config(
        app,
        http=tls_factory(budget, http, lambda: cert.context),  # type: ignore[arg-type]
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        # No WebSocket upgrades: nothing here speaks it, and an upgraded connection would leave
        # the bounds of the HTTP protocol.
        ws="none",
        # Called by the API server directly: no proxy whose X-Forwarded-* headers to trust,
        # and no per-request middleware for it.
        proxy_headers=False,
        server_header=False,
        timeout_keep_alive=30,
        loop=EVENT_LOOP,
        # On SIGTERM: stop accepting, finish in-flight requests, but never hang on a slow client.
        timeout_graceful_shutdown=20,
    )
    from app.webhook.server import core_build

    log.info("serving https://%s:%s (certs %s, core %s)", settings.host, settings.port, settings.cert_dir, core_build())
    if args.dev:
        print(
            f"hostnet-rdma: dev server on https://{settings.host}:{settings.port}  "
            f"(CA: {settings.cert_dir / tls.CA_FILE})\n"
            f"  curl --cacert {settings.cert_dir / tls.CA_FILE} https://127.0.0.1:{settings.port}/healthz",
            file=sys.stderr,
        )
    # What start-up allocated (the web stack, pydantic, our modules) lives as long as the
    # process: out of the collector's sight, a full collection under load does not stop the
    # server to walk it (BENCHMARKS.md, "What we optimised").
    gc.collect()
    gc.freeze()
    try:
        _server(config, background).run()
    finally:
        background.stop()  # when uvicorn returns (start-up failed, or a stop without a signal)
    return 0


def _server(config: Any, background: Background) -> Any:
    """uvicorn's Server, stopping the background loops once its shutdown is done (connections
    drained, the lifespan's shutdown run): the Events thread's last flush then sends what the
    last requests recorded. Not after run(): on SIGTERM uvicorn raises the signal again once it
    has shut down, and the default action ends the process there, before run() returns."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets)
            await asyncio.to_thread(background.stop)  # joins the Events thread: up to 10 s

    return Server(config)


class Background:
    """The server's background loops, started together once the event loop runs and stopped
    together when uvicorn returns: the serving certificate's files (tls.ReloadingCert), the
    config file (ConfigHolder) and, with --self-managed-certs, the Secret and caBundle keeper
    (kube.SelfManagedCerts, in a thread of its own: the Kubernetes client blocks)."""

    def __init__(
        self, cert: tls.ReloadingCert, holder: ConfigHolder, keeper: Any, keeper_every: float, recorder: Any = None
    ) -> None:
        self.cert, self.holder, self.keeper, self.keeper_every = cert, holder, keeper, keeper_every
        self.recorder = recorder
        self._stop = threading.Event()
        self._events: threading.Thread | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        # The loop that runs, not the one asked for: uvloop's kept memory per connection (protocol.EVENT_LOOP).
        logging.getLogger("hostnet_rdma.server").info("event loop %s.%s", type(loop).__module__, type(loop).__name__)
        self.cert.attach(loop)
        self.cert.start()
        self.holder.start()
        if self.keeper is not None:
            threading.Thread(target=self.keeper.run, args=(self._stop, self.keeper_every), name="cert-manage",
                             daemon=True).start()  # fmt: skip
        if self.recorder is not None:
            self._events = threading.Thread(target=self.recorder.run, args=(self._stop,), name="events", daemon=True)
            self._events.start()

    def stop(self) -> None:
        """Idempotent: after uvicorn's shutdown, and again when run() returns."""
        self._stop.set()
        self.cert.stop()
        self.holder.stop()
        if self._events is not None:  # its last flush: what the drained requests recorded
            self._events.join(timeout=10)


def _recorder(args: argparse.Namespace, settings: ServerSettings, log: logging.Logger, holder: ConfigHolder) -> Any:
    """The Events recorder, or None: turned off, or no cluster to send to (a dev server). Events
    go only to namespaces the webhook's selectors admit, as the live config says, and only about
    objects that exist there with the uid the review names (the gates)."""
    if not settings.events:
        return None
    if not (args.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST")):
        log.info("events off: no cluster credentials (in a pod, or --kubeconfig)")
        return None
    from app import kube
    from app.events import NamespaceGate, ObjectGate, Recorder

    try:
        sender = kube.EventSender(kube.api_client(args.kubeconfig))
    except Exception as e:  # a broken kubeconfig must not keep the webhook from serving
        log.warning("events off: cannot load cluster credentials: %s", e)
        return None
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    gates = (NamespaceGate(lambda: holder.config, sender.namespace_labels), ObjectGate(sender.object_uid))
    return Recorder(sender, instance, gates=gates, max_backoff=settings.events_max_backoff_seconds)


def _self_managed(args: argparse.Namespace, settings: ServerSettings) -> Any:
    """Create (or adopt) the CA + serving cert in the Secret and patch our caBundle, before the
    server loads its certificate; the keeper it returns re-checks them (Background). An exit
    code instead when that fails."""
    import datetime as dt

    from app import kube

    namespace = args.namespace or os.environ.get("POD_NAMESPACE", "")
    missing = [f for f, v in (("--namespace/POD_NAMESPACE", namespace), ("--secret", args.secret),
                              ("--service", args.service), ("--webhook-config", args.webhook_config)) if not v]  # fmt: skip
    if missing:
        print(f"hostnet-rdma: error: --self-managed-certs needs {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        from app import config as config_mod

        cluster_domain = config_mod.load(settings.config).cluster_domain
        certs = kube.SelfManagedCerts(
            kube.api_client(args.kubeconfig), namespace, args.secret, args.service, args.webhook_config,
            settings.cert_dir, cluster_domain, dt.timedelta(days=args.rotate_before_days), tuple(args.extra_san),
        )  # fmt: skip
        certs.ensure()
    except kube.ApiException as e:
        hint = ""
        if e.status in (401, 403):
            hint = (f" The ServiceAccount needs get/update on Secret {namespace}/{args.secret}, create on Secrets, "
                    f"and get/patch on MutatingWebhookConfiguration {args.webhook_config} (the chart's RBAC for "
                    "certs.mode=self-managed).")  # fmt: skip
        elif e.status == 404:
            hint = f" Is MutatingWebhookConfiguration {args.webhook_config!r} installed (the chart creates it)?"
        print(f"hostnet-rdma: error: self-managed certificates: {kube.refusal(e)}.{hint}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError, ConfigError) as e:
        print(f"hostnet-rdma: error: self-managed certificates: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # the API server did not answer within kube.TIMEOUT (urllib3's errors)
        print(f"hostnet-rdma: error: self-managed certificates: the API server did not answer: {e}", file=sys.stderr)
        return 1
    return certs


def register(sub: Any) -> None:
    s = sub.add_parser("serve", help="run the admission webhook (HTTPS)")
    s.add_argument("--host", help="listen address (default 0.0.0.0; 127.0.0.1 with --dev)")
    s.add_argument("--port", type=int, help="listen port (default 8443)")
    s.add_argument(
        "--cert-dir", help=f"directory with {tls.CERT_FILE} and {tls.KEY_FILE} (default /etc/hostnet-rdma/tls)"
    )
    s.add_argument("--config", help="cluster config file (NCCL profiles, injection defaults); reloaded on change")
    s.add_argument("--dev", action="store_true", help=f"self-signed CA + cert for 127.0.0.1 in ./{DEV_CERT_DIR}")
    s.add_argument("--self-managed-certs", action="store_true",
                   help="keep a CA + serving cert in a Secret and patch the webhook caBundle (needs RBAC)")  # fmt: skip
    s.add_argument("--namespace", help="namespace of the Secret and Service (default: $POD_NAMESPACE)")
    s.add_argument("--secret", help="Secret holding the CA and serving cert")
    s.add_argument("--service", help="the webhook's Service name (certificate SANs)")
    s.add_argument("--webhook-config", help="MutatingWebhookConfiguration whose caBundle to patch")
    s.add_argument("--rotate-before-days", type=int, default=30, help="renew the serving cert this long before expiry")
    # Cheap (two GETs): a caBundle reset by a `kubectl apply`/`helm upgrade --force` of the
    # webhook configuration is repaired within this interval, and rotations reach every replica.
    s.add_argument("--cert-check-seconds", type=float, default=60.0,
                   help="how often to re-check the Secret and the caBundle (default 60)")  # fmt: skip
    s.add_argument("--extra-san", action="append", default=[],
                   help="extra certificate name/IP (webhook reached by URL, e.g. 127.0.0.1 in tests)")  # fmt: skip
    s.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    s.set_defaults(func=cmd_serve)
