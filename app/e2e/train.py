"""The e2e jobs' training script. It runs inside the user's training image, so it imports torch
and the standard library only (nothing of hostnet-rdma) and stays Python 3.8-compatible.

Every rank checks one all_reduce for the right sum (the world must span every node, or the job
trained alone). Then the data path: between pairs of nodes (a ring, in two or three rounds of
pairs that run at once, so the time does not grow with the nodes), messages of increasing
size (512 B to 64 MiB, each bounded by E2E_SWEEP_BOUND seconds) through the job's own backend,
what training sends; a fabric that drops large frames silently (an MTU or receive-buffer
mismatch on the path) passes the small ones and loses the rest, which the verdict names:

    HOSTNET-RDMA-E2E-SWEEP from=gpu-1 to=gpu-2 largest_ok=67108864 first_lost=- gbps=181.20

Then it times all_reduce of a larger buffer and prints one line:

    HOSTNET-RDMA-E2E-OK rank=0 world=16 node=gpu-1 backend=nccl busbw_gbps=182.41

busbw is nccl-tests' bus bandwidth (algbw * 2 (world - 1) / world), comparable across sizes.
"""

import datetime
import os
import socket
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

OK, FAIL, SWEEP = "HOSTNET-RDMA-E2E-OK", "HOSTNET-RDMA-E2E-FAIL", "HOSTNET-RDMA-E2E-SWEEP"
# From below one frame to well above any fabric's MTU (RoCE's path MTU is 4096).
SIZES = (512, 2048, 8192, 65536, 1 << 20, 8 << 20, 64 << 20)


def say(line: str) -> None:
    # One write per line: the ranks of a node share the agent's stdout.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    backend = os.environ.get("E2E_BACKEND", "gloo")
    size_mb = float(os.environ.get("E2E_SIZE_MB", "4"))
    iters = int(os.environ.get("E2E_ITERS", "10"))
    timeout = datetime.timedelta(seconds=int(os.environ.get("E2E_TIMEOUT", "120")))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    dist.init_process_group(backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    if value.item() != expected:
        say(f"{FAIL} rank={rank} world={world} all_reduce gave {value.item()}, expected {expected}")
        sys.exit(1)
    lost, verdict = sweep(rank, world, device)
    if lost:
        if verdict:
            say(f"{FAIL} rank={rank} world={world} {verdict}")
        sys.stdout.flush()
        os._exit(1)
    if os.environ.get("E2E_SWEEP_ONLY") == "1":
        os._exit(0)
    buf = torch.ones(max(1, int(size_mb * 2**20 / 4)), device=device)
    dist.all_reduce(buf)  # warm-up: NCCL connects its channels on the first large call
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / iters
    busbw = buf.numel() * 4 / seconds / 1e9 * 2 * (world - 1) / max(world, 1)
    dist.barrier()
    say(f"{OK} rank={rank} world={world} node={socket.gethostname()} backend={backend} busbw_gbps={busbw:.2f}")
    if backend == "nccl":
        dist.destroy_process_group()
    # Skip interpreter teardown: gloo's threads sometimes abort the process at exit
    # ("terminate called without an active exception"), which is not what is checked.
    os._exit(0)


def rounds(n: int) -> "list[list[tuple[int, int]]]":
    """Pairs of node indices to sweep, in rounds that run at once: the ring 0-1-2-...-(n-1)-0,
    its edges coloured so that no node is in two pairs of a round (2 rounds for an even n, 3 for
    an odd one). Every node meets two others; the total time is a few rounds whatever n is."""
    if n < 2:
        return []
    if n == 2:
        return [[(0, 1)]]
    edges = [(i, (i + 1) % n) for i in range(n)]
    out = [edges[0 : n - (n % 2) : 2], edges[1 : n - (n % 2) : 2]]
    if n % 2:
        out.append([edges[-1]])
    return [sorted((min(a, b), max(a, b)) for a, b in r) for r in out]


def sweep(rank: int, world: int, device: "torch.device") -> "tuple[bool, str]":
    """Messages of each size in SIZES between the first ranks of pairs of nodes (rounds());
    every rank takes part in the group set-up. (whether any pair lost messages, the verdict this
    rank prints: the first rank of a pair that lost them)."""
    bound = float(os.environ.get("E2E_SWEEP_BOUND", "10"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    long = datetime.timedelta(seconds=int(os.environ.get("E2E_TIMEOUT", "120")))
    everyone: list[Any] = [("", "")] * world  # (local rank, node) of every rank
    dist.all_gather_object(everyone, (local_rank, socket.gethostname()))
    leaders = [r for r, (lr, _) in enumerate(everyone) if lr == 0]
    verdict = ""
    lost = 0
    for pairs in rounds(len(leaders)):
        mine = None
        for a, b in pairs:
            pair = (leaders[a], leaders[b])
            # Every rank creates every group, in one order (torch names groups by a count of
            # them); only a pair's members synchronise: no world-wide barrier per pair.
            group = dist.new_group(list(pair), timeout=long, use_local_synchronization=True)
            if rank in pair:
                mine = (pair, group)
        if mine is not None:
            (first, second), group = mine
            largest, first_lost, gbps = walk(rank, (first, second), group, device, bound)
            a, b = everyone[first][1], everyone[second][1]
            if rank == first:
                say(f"{SWEEP} from={a} to={b} largest_ok={largest} first_lost={first_lost or '-'} gbps={gbps:.2f}")
            if first_lost:
                lost += 1
                if rank == first and not verdict:
                    smaller = f"smaller ones ({largest} bytes) do" if largest else "none arrive at all"
                    verdict = (f"messages of {first_lost} bytes and more do not arrive between {a} and {b}; {smaller}: "
                               "an MTU or receive-buffer mismatch on the path (a hop that drops large frames without "
                               "a word)")  # fmt: skip
        # The next round's pairs start together; a 4-byte all_reduce crosses any path.
        flag = torch.tensor([float(lost)], device=device)
        dist.all_reduce(flag)
        lost = int(flag.item())
    return bool(lost), verdict


def walk(
    rank: int, pair: "tuple[int, int]", group: Any, device: "torch.device", bound: float
) -> "tuple[int, int, float]":
    """One message each way per size until one does not arrive within `bound`: (largest that
    arrived, first lost or 0, Gb/s of the largest)."""
    largest, _first_lost, gbps = 0, 0, 0.0
    other = pair[1] if rank == pair[0] else pair[0]
    for size in SIZES:
        # One message each way (not a collective, which splits its buffer among the ranks:
        # what crosses is then the size named). src/dst are ranks of the whole world.
        data = torch.ones(size // 4, device=device)
        t0 = time.perf_counter()
        try:
            for send in (rank == pair[0], rank != pair[0]):
                op = dist.isend if send else dist.irecv
                op(data, other, group=group).wait(timeout=datetime.timedelta(seconds=bound))
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Exception:  # a timeout, or the transport giving up (NCCL: retry count exceeded)
            return largest, size, gbps
        largest, gbps = size, 2 * size * 8 / max(time.perf_counter() - t0, 1e-9) / 1e9
    return largest, 0, gbps


if __name__ == "__main__":
    main()
