"""What a piece of work costs: CPU seconds and the rise of resident memory at its peak, measured
in a forked child so the high-water mark is this work's alone (the OOM killer counts resident
memory; tracemalloc counts reserved address space too, 127 MiB for orjson's 6 MiB output)."""

from __future__ import annotations

import os
import pickle
import resource
import time
from collections.abc import Callable
from typing import Any


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_peak() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def cost_in_child(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """(CPU seconds, bytes the resident set rose at its peak, what it returned) of fn(), run in
    a forked child whose address space may grow by 2 GiB at most."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        code = 0
        try:
            # A runaway (the findings took 1-2 GiB) fails in the child, not the machine.
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), resource.RLIM_INFINITY))
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the resident set now
            base = _rss_now()
            t0 = time.process_time()
            value = fn()
            out: Any = (time.process_time() - t0, max(0, _rss_peak() - base), value)
        except BaseException as e:
            out, code = repr(e), 1
        os.write(write, pickle.dumps(out))
        os._exit(code)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    result = pickle.loads(data)
    if os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError(f"the measured work failed: {result}")
    cpu, peak, value = result
    return float(cpu), int(peak), value
