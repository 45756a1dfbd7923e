"""The e2e jobs' training script. It runs inside the user's training image, so it imports torch
and the standard library only (nothing of hostnet-rdma) and stays Python 3.8-compatible.

Every rank checks one all_reduce for the right sum (the world must span every node, or the job
trained alone), then times all_reduce of a larger buffer and prints one line:

    HOSTNET-RDMA-E2E-OK rank=0 world=16 node=gpu-1 backend=nccl busbw_gbps=182.41

busbw is nccl-tests' bus bandwidth (algbw * 2 (world - 1) / world), comparable across sizes.
"""

import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

OK, FAIL = "HOSTNET-RDMA-E2E-OK", "HOSTNET-RDMA-E2E-FAIL"


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


if __name__ == "__main__":
    main()
