"""`hostnet-rdma doctor`: the fabric checks the wrapper runs before torchrun, against this node
(or a sysfs tree), and the NCCL_IB_HCA / GID index this node suggests."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.common import CommandError, error, load_config
from app.verify import expected_devices
from app.wrapper import fabric


def cmd_doctor(args: argparse.Namespace) -> int:
    """The fabric checks the wrapper runs before torchrun, against this node (or a sysfs tree)."""
    try:
        cfg = load_config(args.config)
    except CommandError as e:
        return error(str(e))
    env: dict[str, str] = {}
    if args.profile:
        if args.profile not in cfg.profiles:
            print(f"hostnet-rdma: error: unknown profile {args.profile!r}; known: {', '.join(sorted(cfg.profiles))}",
                  file=sys.stderr)  # fmt: skip
            return 2
        env = dict(cfg.profiles[args.profile].env)
    hca = args.hca if args.hca is not None else env.get("NCCL_IB_HCA", "")
    gid_index = args.gid_index if args.gid_index is not None else env.get("NCCL_IB_GID_INDEX", "")
    findings = fabric.check(root=args.sysfs_root, hca=hca, gid_index=gid_index)
    suggested_hca, suggested_gid, left_out = fabric.suggest(args.sysfs_root)
    wanted = expected_devices(suggested_hca)
    matching = sorted(
        name for name, p in cfg.profiles.items()
        if wanted and expected_devices(dict(p.env).get("NCCL_IB_HCA")) == wanted
        and dict(p.env).get("NCCL_IB_GID_INDEX", "") == suggested_gid
    )  # fmt: skip
    ok = not any(f.problem for f in findings)
    if args.output == "json":
        print(json.dumps({
            "ok": ok, "checks": [f.as_dict() for f in findings],
            "suggested": {"NCCL_IB_HCA": suggested_hca, "NCCL_IB_GID_INDEX": suggested_gid, "left_out": left_out},
            "matching_profiles": matching,
        }, indent=2))  # fmt: skip
        return 0 if ok else 1
    width = max(len(f.name) for f in findings)
    given = " ".join(f"{k}={v}" for k, v in (("NCCL_IB_HCA", hca), ("NCCL_IB_GID_INDEX", gid_index)) if v)
    print(f"checked {given or 'the node defaults'} under {args.sysfs_root}")
    for f in findings:
        print(f"{'PASS' if f.ok else ('FAIL' if f.problem else 'INFO')}  {f.name.ljust(width)}  {f.detail}")
    hints = [f"  - {f.name}: {f.hint}" for f in findings if f.problem and f.hint]
    if hints:
        print("\nWhat to do:", *hints, sep="\n")
    if suggested_hca:
        print(
            f"\nThis node has: NCCL_IB_HCA={suggested_hca}"
            + (f" NCCL_IB_GID_INDEX={suggested_gid}" if suggested_gid else "")
        )
        for why in left_out:
            print(f"  left out: {why}")
        print(f"Matching profile: {', '.join(matching)}" if matching else
              "No configured profile matches: add one under config.profiles (values.yaml) with these values.")  # fmt: skip
    return 0 if ok else 1


def register(sub: Any) -> None:
    d = sub.add_parser("doctor", help="check a node's RDMA fabric against an NCCL profile (run on the node)")
    d.add_argument("--sysfs-root", default="/", help="read sys/ and proc/ under this directory (default /)")
    d.add_argument("--profile", help="NCCL profile whose NCCL_IB_HCA / NCCL_IB_GID_INDEX to check")
    d.add_argument("--hca", help="NCCL_IB_HCA to check (overrides the profile's)")
    d.add_argument("--gid-index", help="NCCL_IB_GID_INDEX to check (overrides the profile's)")
    d.add_argument("--config", help="cluster config file (for its profiles)")
    d.add_argument("-o", "--output", choices=("table", "json"), default="table")
    d.set_defaults(func=cmd_doctor)
