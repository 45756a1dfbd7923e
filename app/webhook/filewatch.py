"""One watcher for files that change under a running server (certificates, config).

Mounted Secrets and ConfigMaps update by swapping a `..data` symlink, which inotify-based
watchers sometimes miss, so we watch the directory *and* call back every poll interval.
The callback decides whether anything really changed.

The watcher's threads run on the server's cores, beside the event loop: the directory is
watched alone, not its subtrees (the symlink swap happens in it; a config passed from a
working directory must not put the whole tree under inotify), and the watcher wakes twice a
second, not watchfiles' default twenty times, to look for changes and for `stop`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("hostnet_rdma.filewatch")

STEP_MS = 500  # how often the watcher wakes (watchfiles' `step`); changes show within ~2 s


def watch_and_poll(
    directory: Path, stop: threading.Event, poll_seconds: float, on_tick: Callable[[], object], name: str
) -> threading.Thread:
    """Run `on_tick` on every change in `directory` and every `poll_seconds`, until `stop`."""

    def run() -> None:
        try:
            from watchfiles import watch

            for _ in watch(
                directory, stop_event=stop, rust_timeout=int(poll_seconds * 1000), yield_on_timeout=True,
                recursive=False, step=min(STEP_MS, max(1, int(poll_seconds * 1000))),
            ):  # fmt: skip
                on_tick()
        except Exception as e:  # no inotify (or the directory vanished): poll only
            log.warning("file watch on %s failed (%s); polling every %ss", directory, e, poll_seconds)
            while not stop.wait(poll_seconds):
                on_tick()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
