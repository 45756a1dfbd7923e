"""Server settings: flags override env (HOSTNET_RDMA_*), which override these defaults."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HOSTNET_RDMA_", extra="ignore")

    host: str = "0.0.0.0"
    port: int = 8443
    cert_dir: Path = Path("/etc/hostnet-rdma/tls")
    config: Path | None = None
    # Config and cert files are also polled, for volumes whose updates watchers miss.
    poll_seconds: float = 10.0
    max_body_bytes: int = 7 * 1024 * 1024
    # Request bodies held at once, across requests (app.webhook.server.HeldBytes): with the chart's
    # 256 MiB limit, what a burst of the largest reviews may hold besides the one under review.
    max_held_body_bytes: int = 16 * 1024 * 1024
    # Every request must arrive whole within this many seconds, with headers under this size.
    request_timeout_seconds: float = 10.0
    max_header_bytes: int = 64 * 1024
    # Open connections, counted from accept (handshakes included), and those in the TLS handshake;
    # a new one over either takes the place of the oldest without a request answered
    # (app.webhook.connections). What one costs: docs/security.md, "Per-connection budget".
    max_connections: int = 1000
    max_handshakes: int = 100
    # Not ready for a while (server.AdmissionHandler.SLOW_HOLD_SECONDS) after a review took longer
    # than this: the chart sets half the webhook's timeoutSeconds.
    ready_max_review_seconds: float = 2.5
    log_level: str = "info"
    # Events (events.k8s.io/v1) on the job of every opted-in pod, what was injected and each
    # warning (app.events); needs cluster credentials (in a pod: its ServiceAccount's).
    events: bool = True
    # After the API server fails to answer an Event call, none for 1 s, doubling up to this.
    events_max_backoff_seconds: float = 60.0
    # Namespace assumed when a review carries none.
    default_namespace: str = "default"
