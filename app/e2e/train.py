"""The e2e jobs' training script. It runs inside the user's training image, so it imports torch
and the standard library only (nothing of hostnet-rdma) and stays Python 3.8-compatible.

Every rank checks one all_reduce for the right sum (the world must span every node, or the job
trained alone). Then the data path: between node 0 and each other node, messages of increasing
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
    lost = sweep(rank, world, device)
    if lost:
        if rank == 0:
            say(f"{FAIL} rank={rank} world={world} {lost}")
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


def sweep(rank: int, world: int, device: "torch.device") -> str:
    """Messages of each size in SIZES between node 0's first rank and each other node's; every
    rank takes part in the group set-up. "" when all arrived, else the verdict (same on every rank)."""
    bound = float(os.environ.get("E2E_SWEEP_BOUND", "10"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    everyone: list[Any] = [("", "")] * world  # (local rank, node) of every rank
    dist.all_gather_object(everyone, (local_rank, socket.gethostname()))
    leaders = [r for r, (lr, _) in enumerate(everyone) if lr == 0]
    lost_at: list[Any] = []  # (from, to, first lost size, largest arrived)
    for peer in leaders[1:]:
        pair = (leaders[0], peer)
        group = dist.new_group(list(pair), timeout=datetime.timedelta(seconds=bound))
        if rank not in pair:
            continue
        largest, first_lost, gbps = 0, 0, 0.0
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
                first_lost = size
                break
            largest, gbps = size, 2 * size * 8 / max(time.perf_counter() - t0, 1e-9) / 1e9
        a, b = everyone[pair[0]][1], everyone[pair[1]][1]
        if rank == pair[0]:
            say(f"{SWEEP} from={a} to={b} largest_ok={largest} first_lost={first_lost or '-'} gbps={gbps:.2f}")
        if first_lost:
            lost_at.append((a, b, first_lost, largest))
    # Every rank learns whether a pair lost messages: a 4-byte all_reduce crosses any path.
    flag = torch.tensor([float(len(lost_at))], device=device)
    dist.all_reduce(flag)
    if not flag.item():
        return ""
    if not lost_at:
        return "messages between some nodes do not arrive (see the node-0 pod's SWEEP lines)"
    a, b, first, largest = lost_at[0]
    smaller = f"smaller ones ({largest} bytes) do" if largest else "none arrive at all"
    return (
        f"messages of {first} bytes and more do not arrive between {a} and {b}; {smaller}: an MTU or "
        "receive-buffer mismatch on the path (a hop that drops large frames without a word)"
    )


if __name__ == "__main__":
    main()
