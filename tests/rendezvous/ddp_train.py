"""A tiny DDP job on CPU (gloo): an all_reduce checked for the right sum, then a few steps."""

import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    timeout = datetime.timedelta(seconds=int(os.environ.get("DDP_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    assert value.item() == expected, f"all_reduce gave {value.item()}, expected {expected}"
    torch.manual_seed(rank)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        opt.step()
    # DDP keeps replicas identical: every rank must hold the same weights.
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    assert all(torch.equal(g, gathered[0]) for g in gathered), "DDP replicas diverged"
    dist.barrier()
    # One write per line: ranks share the agent's stdout.
    sys.stdout.write(
        f"DDP-OK rank={rank} world={world} sum={value.item():.0f} host={socket.gethostname()} "
        f"master={os.environ.get('MASTER_ADDR')}\n"
    )
    sys.stdout.flush()
    # Skip interpreter teardown: torch's gloo threads sometimes abort the process at exit
    # ("terminate called without an active exception"), which is not what is under test.
    os._exit(0)


if __name__ == "__main__":
    main()
