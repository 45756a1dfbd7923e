"""`hostnet-rdma doctor`: the fabric checks the wrapper runs before torchrun, against this node
(or a sysfs tree), and the NCCL_IB_HCA / GID index this node suggests. `doctor --cluster`: the
fleet's table from the fabric watch's node conditions (docs/fabric-watch.md). `doctor --between A,B`:
the data path between two nodes, from the cluster: a two-pod job (one on each node, host
network, through the webhook) sends messages of 512 B to 64 MiB between them and says the
largest that arrived, and why when the large ones do not."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.common import CommandError, error, load_config
from app.verify import expected_devices
from app.wrapper import fabric


def cmd_between(args: argparse.Namespace) -> int:
    """The data-path sweep between two named nodes, through a job of the e2e suite's."""
    from app import kube
    from app.e2e import run
    from app.e2e.jobs import DEFAULT_IMAGE, Params

    nodes = tuple(n.strip() for n in args.between.split(",") if n.strip())
    if len(nodes) != 2:
        return error("--between takes two node names: A,B")
    backend = args.backend if args.backend != "auto" else ("nccl" if args.gpus_per_node else "gloo")
    params = Params(namespace="", image=args.image or DEFAULT_IMAGE, image_pull_policy=args.image_pull_policy,
                    gpus_per_node=args.gpus_per_node, gpu_resource=args.gpu_resource, backend=backend,
                    nproc_per_node=1, tolerations=tuple(args.toleration), host_paths=tuple(args.torch_host_path),
                    sweep_only=True, sweep_bound=args.bound, on_nodes=nodes)  # fmt: skip
    say = print if args.output == "table" else (lambda line: None)
    try:
        api = kube.api_client(args.kubeconfig, args.context)
        (result,) = run.run(api, run.Options(params, launchers=["job"], timeout=args.timeout),
                            say=lambda line: say(f"doctor: {line}"))  # fmt: skip
    except run.E2EError as e:
        return error(str(e))
    except kube.ApiException as e:
        return error(f"the API server refused: {kube.refusal(e)}")
    if args.output == "json":
        print(json.dumps({"ok": result.ok, "path": result.path, "detail": result.detail, "seconds": result.seconds},
                         indent=2))  # fmt: skip
    else:
        print(f"{'PASS' if result.ok else 'FAIL'}  path {' -> '.join(nodes)}: {result.path or '-'} "
              f"({result.seconds or 0:.0f}s)")  # fmt: skip
        if result.detail:
            print(f"  {result.detail}")
    return 0 if result.ok else 1


def cmd_cluster(args: argparse.Namespace) -> int:
    """The fleet's table, from the fabric watch's node conditions."""
    import datetime as dt

    from app import kube
    from app.fleet import table

    nodes = kube.list_nodes(kube.api_client(args.kubeconfig, args.context))
    rows = table.rows(nodes, dt.datetime.now(dt.UTC))
    if args.output == "json":
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(table.render(rows))
        if rows and all(r.state == "NO-AGENT" for r in rows):
            print("\nNo node has a fabric-watch condition: is the agent installed (fabricWatch.enabled=true)?")
    return 0 if table.healthy(rows) else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    """The fabric checks the wrapper runs before torchrun, against this node (or a sysfs tree)."""
    if args.between and args.cluster:
        return error("--between and --cluster are two different checks: give one")
    if args.cluster:
        return cmd_cluster(args)
    if args.between:
        return cmd_between(args)
    import os

    if not os.path.isdir(os.path.join(args.sysfs_root, "sys")) or not os.path.isdir(
        os.path.join(args.sysfs_root, "proc")
    ):
        # A wrong root would read as a node without RDMA devices, checks failing for no reason.
        return error(f"--sysfs-root {args.sysfs_root}: no sys/ and proc/ there (give the directory that holds them)")
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
            "ok": ok, "checks": [{**f.as_dict(), "status": _status(f)} for f in findings],
            "suggested": {"NCCL_IB_HCA": suggested_hca, "NCCL_IB_GID_INDEX": suggested_gid, "left_out": left_out},
            "matching_profiles": matching,
        }, indent=2))  # fmt: skip
        return 0 if ok else 1
    width = max(len(f.name) for f in findings)
    given = " ".join(f"{k}={v}" for k, v in (("NCCL_IB_HCA", hca), ("NCCL_IB_GID_INDEX", gid_index)) if v)
    print(f"checked {given or 'the node defaults'} under {args.sysfs_root}")
    for f in findings:
        print(f"{_status(f)}  {f.name.ljust(width)}  {f.detail}")
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
    d.add_argument("--cluster", action="store_true",
                   help="the fleet's table from the fabric watch's node conditions (exit 1 when any is degraded or stale)")  # fmt: skip
    b = d.add_argument_group("the data path between two nodes (from the cluster, not on a node)")
    b.add_argument("--between", metavar="A,B", help="send messages of 512 B to 64 MiB between these two nodes")
    b.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG / ~/.kube/config)")
    b.add_argument("--context", help="kubeconfig context (default: the current one)")
    b.add_argument("--image", help="training image with torch (default: the e2e suite's)")
    b.add_argument("--image-pull-policy", default="IfNotPresent", choices=("Always", "IfNotPresent", "Never"))
    b.add_argument(
        "--gpus-per-node", type=int, default=0, help="GPUs each pod requests; with GPUs the sweep runs on NCCL"
    )
    b.add_argument("--gpu-resource", default="nvidia.com/gpu")
    b.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    b.add_argument("--toleration", action="append", default=[], metavar="KEY")
    b.add_argument("--torch-host-path", action="append", default=[], metavar="DIR")
    b.add_argument("--bound", type=int, default=10, help="seconds each message size may take (default 10)")
    b.add_argument("--timeout", type=float, default=300, help="seconds for the whole check (default 300)")
    d.set_defaults(func=cmd_doctor)


def _status(f: fabric.Finding) -> str:
    """PASS, FAIL (a problem) or INFO (not ok, not a problem): the table's word, and the JSON's."""
    return "PASS" if f.ok else ("FAIL" if f.problem else "INFO")
