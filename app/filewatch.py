"""One watcher for files that change under a running server (certificates, config).

Mounted Secrets and ConfigMaps update by swapping a `..data` symlink, which inotify-based
watchers sometimes miss, so we watch the directory *and* call back every poll interval.
The callback decides whether anything really changed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("hostnet_rdma.filewatch")


def watch_and_poll(
    directory: Path, stop: threading.Event, poll_seconds: float, on_tick: Callable[[], object], name: str
) -> threading.Thread:
    """Run `on_tick` on every change in `directory` and every `poll_seconds`, until `stop`."""

    def run() -> None:
        try:
            from watchfiles import watch

            for _ in watch(directory, stop_event=stop, rust_timeout=int(poll_seconds * 1000), yield_on_timeout=True):
                on_tick()
        except Exception as e:  # no inotify (or the directory vanished): poll only
            log.warning("file watch on %s failed (%s); polling every %ss", directory, e, poll_seconds)
            while not stop.wait(poll_seconds):
                on_tick()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
