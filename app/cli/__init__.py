"""hostnet-rdma: RDMA plumbing and torchrun rendezvous for host-network PyTorch pods.

serve    run the admission webhook
mutate   print a pod file exactly as the webhook would change it
explain  why a pod was, or would be, mutated or not
verify   check a training pod's log: NCCL over IB with GDRDMA, the wrapper's line
doctor   check a node's RDMA fabric against an NCCL profile
"""

# One module per command (app/cli/<command>.py, each with register() and its cmd_ function);
# app/cli/common.py is what they share. import-linter keeps the commands independent.

from __future__ import annotations

import argparse

from app import __version__
from app.cli import doctor, explain, mutate, serve, verify

COMMANDS = (serve, mutate, explain, verify, doctor)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hostnet-rdma", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--version", action="version", version=f"hostnet-rdma {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc
