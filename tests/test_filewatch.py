"""app.webhook.filewatch against the real watcher (watchfiles over inotify): what wakes the callback,
what does not, and how often its thread wakes beside the server's event loop."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from app.webhook import filewatch

POLL = 60.0  # longer than every test here: a tick seen is a change seen, not the poll


class Ticks:
    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def wait(self, seconds: float) -> bool:
        seen = self.event.wait(seconds)
        self.event.clear()
        return seen


@pytest.fixture
def watched(tmp_path: Path):  # type: ignore[no-untyped-def]
    stop = threading.Event()
    ticks = Ticks()
    thread = filewatch.watch_and_poll(tmp_path, stop, POLL, ticks, "test-watch")
    time.sleep(0.3)  # the inotify watch is in place once watch() runs
    yield tmp_path, ticks, thread
    stop.set()
    thread.join(timeout=5)


def test_a_file_written_in_the_directory_ticks(watched) -> None:  # type: ignore[no-untyped-def]
    directory, ticks, _ = watched
    (directory / "config.yaml").write_text("a: 1\n")
    assert ticks.wait(5), "no callback within 5 s of a write in the watched directory"


def test_a_configmap_style_symlink_swap_ticks(watched) -> None:  # type: ignore[no-untyped-def]
    # The kubelet updates a mounted ConfigMap by writing a new timestamped directory and
    # renaming a fresh `..data` symlink over the old one, all in the mount's top directory.
    directory, ticks, _ = watched
    (directory / "..2026_12_01").mkdir()
    (directory / "..2026_12_01" / "config.yaml").write_text("a: 1\n")
    os.symlink("..2026_12_01", directory / "..data")
    os.symlink("..data/config.yaml", directory / "config.yaml")
    assert ticks.wait(5)
    (directory / "..2026_12_02").mkdir()
    (directory / "..2026_12_02" / "config.yaml").write_text("a: 2\n")
    os.symlink("..2026_12_02", directory / "..data_tmp")
    os.rename(directory / "..data_tmp", directory / "..data")
    assert ticks.wait(5), "the swap of ..data (a ConfigMap update) was not seen"


@pytest.mark.slow
def test_writes_below_the_directory_do_not_tick(watched) -> None:  # type: ignore[no-untyped-def]
    # A config passed from a working directory must not put the whole tree under inotify,
    # nor wake the server for every file written below it (logs, a build).
    directory, ticks, _ = watched
    below = directory / "logs"
    below.mkdir()
    ticks.wait(3)  # the mkdir itself is a change of the directory
    for i in range(20):
        (below / "server.log").write_text(f"line {i}\n")
        time.sleep(0.05)
    assert not ticks.wait(3), "a write in a subdirectory woke the callback"
    (directory / "config.yaml").write_text("b: 1\n")
    assert ticks.wait(5)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_watcher_thread_wakes_about_twice_a_second(watched) -> None:  # type: ignore[no-untyped-def]
    # watchfiles' default step wakes its thread 20 times a second (each time taking the GIL)
    # on the cores the event loop answers on.
    _, _, thread = watched

    def switches() -> int:
        status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt")))

    before = switches()
    time.sleep(4)
    woke = switches() - before
    assert woke <= 4 * 1000 / filewatch.STEP_MS * 2 + 4, f"the watcher thread woke {woke} times in 4 s"
