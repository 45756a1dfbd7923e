"""`hostnet-rdma e2e`: prove a cluster end to end. A 2-node job per launcher, plain `torchrun`,
through the installed webhook, in a namespace it creates and deletes; per job: the result, wall
time, the store host, the world size, all_reduce bus bandwidth and, on GPUs, the `verify`
verdict of each pod's NCCL log."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from app.cli.common import error
from app.e2e.jobs import DEFAULT_IMAGE


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got {v!r}")
        out[key] = value
    return out


def _launchers(values: list[str]) -> list[str] | None:
    from app.e2e.jobs import LAUNCHERS

    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names or names == ["all"]:
        return None
    unknown = [n for n in names if n not in LAUNCHERS]
    if unknown:
        raise ValueError(f"unknown launcher {', '.join(unknown)}; known: {', '.join(LAUNCHERS)}")
    return list(dict.fromkeys(names))


def cmd_e2e(args: argparse.Namespace) -> int:
    from app import kube
    from app.e2e import outcome, run
    from app.e2e.jobs import Params

    try:
        node_selector = _pairs(args.node_selector, "--node-selector")
        launchers = _launchers(args.launcher)
    except ValueError as e:
        return error(str(e))
    if args.nodes < 2:
        return error("--nodes must be 2 or more: a one-node job proves no rendezvous")
    backend = args.backend if args.backend != "auto" else ("nccl" if args.gpus_per_node else "gloo")
    nproc = args.nproc_per_node or args.gpus_per_node or 1
    params = Params(
        namespace=args.namespace_name or "", image=args.image, image_pull_policy=args.image_pull_policy,
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, gpu_resource=args.gpu_resource, nproc_per_node=nproc,
        backend=backend, node_selector=node_selector, tolerations=tuple(args.toleration),
        host_paths=tuple(args.torch_host_path),
        size_mb=args.size_mb if args.size_mb is not None else (256.0 if backend == "nccl" else 4.0),
    )  # fmt: skip
    if args.parallel < 0:
        return error("--parallel must be 0 (the default) or more")
    quiet = args.output == "json"
    status = Status(sys.stderr)
    opts = run.Options(params=params, launchers=launchers, timeout=args.timeout, keep=args.keep,
                       cluster_queue=args.cluster_queue or "", parallel=args.parallel or None,
                       every=run.PROGRESS_SECONDS if quiet or not status.live else 2.0)  # fmt: skip
    try:
        api = kube.api_client(args.kubeconfig, args.context)
        results = run.run(api, opts, say=lambda line: None if quiet else status.say(f"e2e: {line}"))
    except run.E2EError as e:
        return error(str(e))
    except kube.ApiException as e:
        return error(f"the API server refused: {kube.refusal(e)}")
    except Exception as e:  # kubeconfig problems, connection refused: one line, not a traceback
        if type(e).__module__.startswith(("kubernetes", "urllib3")) or isinstance(e, OSError):
            return error(f"cannot reach the cluster: {e}")
        raise
    # A launcher asked for by name must run; with the default set, absent ones are reported only.
    failed = [r for r in results if not r.ok and (r.outcome != "not present" or launchers is not None)]
    if args.output == "json":
        print(json.dumps({"ok": not failed, "jobs": [r.as_dict() for r in results]}, indent=2))
    else:
        print(outcome.table(results))
        ran = [r for r in results if r.outcome != "not present"]
        if not ran:
            print("\nno launcher ran", file=sys.stderr)
        absent = [r.launcher for r in results if r.outcome == "not present"]
        summary = f"\n{sum(r.ok for r in results)} passed, {sum(r.outcome in ('failed', 'timed out') for r in results)} failed"
        if absent:
            summary += f", {len(absent)} not present" + (" (asked for by name)" if launchers is not None else "")
        print(summary)
    return 1 if failed or not any(r.ok for r in results) else 0


class Status:
    """On a terminal, what running jobs wait for is one line rewritten in place (every 2 s);
    the rest, and everything in CI or a pipe, are plain lines (a running job's every 30 s)."""

    WAITING = ": still running after "

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = False

    def say(self, line: str) -> None:
        if self.live and self.WAITING in line:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r\x1b[K" + (line if len(line) <= width else line[: width - 1] + "…"))
            self.shown = True
        else:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.shown = False
            print(line, flush=True)
        self.stream.flush()


def register(sub: Any) -> None:
    e = sub.add_parser("e2e", help="run a 2-node job per launcher through the webhook and check it end to end",
                       description=__doc__)  # fmt: skip
    e.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG / ~/.kube/config)")
    e.add_argument("--context", help="kubeconfig context (default: the current one)")
    e.add_argument("--launcher", action="append", default=[], metavar="NAME[,NAME]",
                   help="job, statefulset, jobset, lws, pytorchjob, trainjob, volcano (default: every one the "
                        "cluster serves; the others are reported as not present)")  # fmt: skip
    e.add_argument("--image", default=DEFAULT_IMAGE, help=f"training image with torch (default {DEFAULT_IMAGE})")
    e.add_argument("--image-pull-policy", default="IfNotPresent", choices=("Always", "IfNotPresent", "Never"))
    e.add_argument("--nodes", type=int, default=2, help="nodes per job (default 2)")
    e.add_argument("--gpus-per-node", type=int, default=0, help="GPUs each pod requests; 0: a CPU run with gloo")
    e.add_argument("--gpu-resource", default="nvidia.com/gpu", help="the GPU resource name (default nvidia.com/gpu)")
    e.add_argument("--nproc-per-node", type=int, default=0, help="ranks per pod (default: --gpus-per-node, else 1)")
    e.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="torch.distributed backend (default: nccl with GPUs, else gloo)")  # fmt: skip
    e.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE",
                   help="run on these nodes only (e.g. node.kubernetes.io/instance-type=BM.GPU4.8)")  # fmt: skip
    e.add_argument("--toleration", action="append", default=[], metavar="KEY", help="tolerate taints with this key")
    e.add_argument("--torch-host-path", action="append", default=[], metavar="DIR",
                   help="a node directory put on the pods' PYTHONPATH, read-only (for an image without torch)")  # fmt: skip
    e.add_argument("--size-mb", type=float, help="all_reduce buffer for the bandwidth figure (default 256 with "
                                                 "NCCL, 4 with gloo)")  # fmt: skip
    e.add_argument("--timeout", type=float, default=600, help="seconds per job, image pulls included (default 600)")
    e.add_argument("--parallel", type=int, default=0, metavar="N",
                   help="jobs at once (default: one after another with --gpus-per-node, after checking that enough "
                        "nodes have the GPUs free; all side by side without GPUs)")  # fmt: skip
    e.add_argument("--namespace-name", help="the namespace to create (default hostnet-rdma-e2e-<random>)")
    e.add_argument("--keep", action="store_true", help="keep the namespace and its jobs afterwards")
    e.add_argument("--cluster-queue", metavar="NAME",
                   help="Kueue: submit the jobs through a LocalQueue for this ClusterQueue, created in the run's "
                        "namespace (where Kueue manages every job, manageJobsWithoutQueueName)")  # fmt: skip
    e.add_argument("-o", "--output", choices=("table", "json"), default="table")
    e.set_defaults(func=cmd_e2e)
