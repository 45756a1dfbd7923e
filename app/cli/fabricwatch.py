"""`hostnet-rdma fabric-watch`: the node agent. At start and every interval it runs doctor's
checks of this node and pathprobe's size sweep to this round's peers, and publishes the answer:
the node condition `HostnetRdmaFabricDegraded`, an Event when it changes, Prometheus metrics,
optionally a NoSchedule taint. The decisions are app.fleet's; this module reads the node (sysfs,
its interfaces), sends the probes and serves the metrics."""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any

from app.cli.common import error
from app.fleet import agent as fleet_agent
from app.fleet import cleanup
from app.fleet import condition as cond
from app.fleet import report as rep
from app.wrapper import fabric, pathprobe

log = logging.getLogger("hostnet_rdma.fabricwatch")
PROBES_AT_ONCE = 8  # pathprobe's own bound on threads
SIOCGIFADDR = 0x8915


# ---------------------------------------------------------------------------- this node
def ipv4_of(iface: str) -> str | None:
    """The interface's IPv4 address, asked of the kernel (SIOCGIFADDR)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            out = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
        return socket.inet_ntoa(out[20:24])
    except OSError:
        return None


def rdma_netdevs(root: str) -> list[str]:
    """The network interfaces of the node's RDMA devices (RoCE: one each; IB: IPoIB)."""
    found: list[str] = []
    for dev in fabric.devices(root):
        try:
            found += sorted(os.listdir(os.path.join(root, fabric.IB, dev, "device", "net")))
        except OSError:
            continue
    return list(dict.fromkeys(found))


def default_route_iface(root: str) -> str | None:
    try:
        with open(os.path.join(root, "proc/net/route")) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 1 and fields[1] == "00000000":
                    return fields[0]
    except OSError:
        return None
    return None


def read_local(args: argparse.Namespace) -> fleet_agent.Local:
    root = args.sysfs_root
    rdma = bool(fabric.devices(root))
    names = list(args.netdev) or rdma_netdevs(root) or [i for i in [default_route_iface(root)] if i]
    netdevs = []
    for name in names[: rep.MAX_NETDEVS]:
        address = ipv4_of(name)
        if address and rep.usable_address(address) is None:
            netdevs.append(rep.Netdev(name, address, pathprobe.mtu(name)))
    findings: list[cond.LocalFinding] = []
    if rdma:
        _, gid_index, _ = fabric.suggest(root)
        for f in fabric.check(root=root, gid_index=gid_index or "0", expect_gpus=args.expect_gpus):
            if f.name == "gid" and not gid_index:
                findings.append(cond.LocalFinding("gid", True, "no RoCE v2 GID index with an address on every "
                                                  "active RoCE port"))  # fmt: skip
            elif f.name in ("ports", "gid") or (f.name == "gpudirect" and args.expect_gpus):
                findings.append(cond.LocalFinding(f.name, f.problem, f.detail))
    elif args.require_rdma:
        findings.append(cond.LocalFinding("devices", True, f"no RDMA devices under /{fabric.IB}: the driver or the "
                                          "device plugin did not come up on this node"))  # fmt: skip
    return fleet_agent.Local(tuple(findings), tuple(netdevs), rdma)


def probe(todo: list[fleet_agent.Target], timeout: float) -> list[cond.PathResult]:
    """pathprobe's sweep of each target, PROBES_AT_ONCE at a time (each at most ~8 s)."""
    out: list[cond.PathResult] = []
    for start in range(0, len(todo), PROBES_AT_ONCE):
        batch = todo[start : start + PROBES_AT_ONCE]
        found: dict[int, pathprobe.Path] = {}

        def one(i: int, t: fleet_agent.Target, into: dict[int, pathprobe.Path]) -> None:
            into[i] = pathprobe.probe(t.address, t.netdev, timeout, t.limit)

        threads = [threading.Thread(target=one, args=(i, t, found), daemon=True) for i, t in enumerate(batch)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        for i, t in enumerate(batch):
            p = found.get(i)
            if p is None:
                out.append(cond.PathResult(t.peer, t.address, t.netdev, limit=t.limit, error="the probe did not end"))
            else:
                out.append(cond.PathResult(t.peer, t.address, t.netdev, tuple(p.crossed), p.first_lost, t.limit,
                                           p.error))  # fmt: skip
    return out


# ---------------------------------------------------------------------------- metrics
class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        p = "hostnet_rdma_fabric_"
        self.check = Gauge(p + "check_ok", "doctor's checks of this node (1 ok, 0 a problem)", ["check"],
                           registry=self.registry)  # fmt: skip
        self.largest = Gauge(p + "path_largest_bytes", "largest IP packet that crossed to a peer, last sweep",
                             ["peer", "netdev"], registry=self.registry)  # fmt: skip
        self.first_lost = Gauge(p + "path_first_lost_bytes", "first size that did not cross (0: none lost)",
                                ["peer", "netdev"], registry=self.registry)  # fmt: skip
        self.degraded = Gauge(p + "degraded", "the node condition (1 True, 0 False, -1 Unknown)", ["reason"],
                              registry=self.registry)  # fmt: skip
        self.last_round = Gauge(p + "last_round_timestamp_seconds", "when the last round ended",
                                registry=self.registry)  # fmt: skip
        self.round_seconds = Gauge(p + "round_duration_seconds", "how long the last round took",
                                   registry=self.registry)  # fmt: skip
        self.peers = Gauge(p + "peers", "nodes of the fleet probed this cycle", registry=self.registry)
        self.api_errors = Counter(p + "api_errors", "API server calls that failed", registry=self.registry)

    def update(self, out: fleet_agent.RoundOutcome, took: float) -> None:
        self.check.clear()
        for f in out.local.findings:
            self.check.labels(f.name).set(0 if f.problem else 1)
        # Only this round's paths: a label per peer of a 10,000-node fleet would be 10,000 series a node.
        self.largest.clear()
        self.first_lost.clear()
        for r in out.paths:
            self.largest.labels(r.peer, r.netdev).set(r.largest)
            self.first_lost.labels(r.peer, r.netdev).set(r.first_lost)
        self.degraded.clear()
        self.degraded.labels(out.condition.reason).set({"True": 1, "False": 0}.get(out.condition.status, -1))
        self.last_round.set(time.time())
        self.round_seconds.set(took)
        self.peers.set(out.peers)
        self.api_errors.inc(len(out.api_errors))


# ---------------------------------------------------------------------------- the command
class OfflineApi:
    """`--once --peer NAME=IP`: a round against peers given on the command line, without the API
    server (an operator on a node, or a test); nothing is written."""

    def __init__(self, me: str, peers: dict[str, str], mtu: int) -> None:
        self.me, self.peers, self.mtu = me, peers, mtu

    def members(self) -> list[str]:
        return sorted(self.peers)

    def node(self, name: str) -> dict[str, Any] | None:
        if name not in self.peers:
            return None
        report = rep.Report((rep.Netdev("peer0", self.peers[name], self.mtu),), False, 60, 300).to_annotation()
        return {"metadata": {"name": name, "annotations": {rep.ANNOTATION: report}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip

    def write_condition(self, node: str, condition: dict[str, str]) -> None: ...
    def write_report(self, node: str, annotation: str) -> None: ...
    def set_taint(self, node: str, on: bool, key: str) -> None: ...
    def event(self, node: str, kind: str, reason: str, message: str) -> None: ...


def by_hand_per_round(peers: int, configured: int) -> int:
    """Slots a round for a round by hand, where every peer given is probed: with this node, n
    peers take n + 1 seats (one more, a bye, when that is odd), so n + 1 slots meet them all
    whatever the round's number (n slots missed one in rounds that hold the bye)."""
    return min(max(configured, peers + 1), 64)


def parse_peers(given: list[str]) -> dict[str, str]:
    peers: dict[str, str] = {}
    for item in given:
        name, _, address = item.partition("=")
        why = rep.usable_address(address) if name and address else "give NAME=IPv4"
        if why:
            raise ValueError(f"--peer {item}: {why}")
        peers[name] = address
    return peers


CLEAR_COMMAND = "hostnet-rdma fabric-watch --clear"
DEFAULT_AGENTS_TIMEOUT = 120.0


def parse_agents(given: str) -> tuple[str, str]:
    """`--wait-for-agents NAMESPACE/SELECTOR`: split at the first `/` (a namespace has none; a
    label selector often does, `app.kubernetes.io/component=fabric-watch`)."""
    namespace, _, selector = given.partition("/")
    if not namespace or not selector:
        raise ValueError(f"--wait-for-agents {given}: give NAMESPACE/SELECTOR, e.g. "
                         "hostnet-rdma-system/app.kubernetes.io/component=fabric-watch")  # fmt: skip
    return namespace, selector


def cmd_clear(args: argparse.Namespace) -> int:
    """`fabric-watch --clear`: wait (bounded) until no agent pod is left, then take our condition,
    report annotation and taint off every Node (app.fleet.cleanup decides what); one line per
    Node changed. Exit 0 when done, 1 when a Node could not be cleared or agents are still there."""
    if args.once or args.peer:
        return error("--clear takes the fabric watch's marks off every Node: it does not go with --once or --peer")
    try:
        agents = parse_agents(args.wait_for_agents) if args.wait_for_agents else None
    except ValueError as e:
        return error(str(e))
    if args.timeout is None:
        args.timeout = DEFAULT_AGENTS_TIMEOUT
    if args.timeout <= 0:
        return error(f"--timeout {args.timeout}: give the seconds to wait for the agents, more than 0")
    from app import kube

    try:
        api = kube.NodeCleanupApi(kube.api_client(args.kubeconfig, args.context))
    except kube.KubeconfigError as e:
        return error(str(e))
    remaining: list[str] = []
    if agents:
        namespace, selector = agents
        remaining = cleanup.wait_for_agents(lambda: api.pods(namespace, selector), args.timeout, time.monotonic,
                                            time.sleep)  # fmt: skip
        if remaining:
            # Cleared all the same: a pod stuck terminating on a node that is gone never leaves,
            # and its marks must not stay. Said, and the exit code says it too.
            print(f"hostnet-rdma: warning: {len(remaining)} fabric-watch agent pod(s) still there after "
                  f"{args.timeout:g} s: {', '.join(remaining[:10])}" + (", ..." if len(remaining) > 10 else "")
                  + "; clearing anyway", file=sys.stderr)  # fmt: skip
    out = cleanup.clear(api)
    for node, removed in out.changed:
        print(f"{node}: removed {', '.join(removed)}", flush=True)
    print(f"hostnet-rdma: fabric-watch --clear: {len(out.changed)} of {out.seen} Node(s) changed, "
          f"{len(out.failed)} failed", file=sys.stderr)  # fmt: skip
    code = 0
    for node, why in out.failed:
        print(f"hostnet-rdma: error: could not clear Node {node}: {why}", file=sys.stderr)
        code = 1
    if out.failed:
        print(f"hostnet-rdma: {len(out.failed)} Node(s) still carry the fabric watch's marks "
              f"({', '.join(n for n, _ in out.failed[:10])}): run `{CLEAR_COMMAND}` again", file=sys.stderr)  # fmt: skip
    if out.list_error:
        print(f"hostnet-rdma: error: could not list the Nodes (after {out.seen}): {out.list_error}; the command "
              f"needs get, list and patch on nodes, patch on nodes/status: run `{CLEAR_COMMAND}` again",
              file=sys.stderr)  # fmt: skip
        code = 1
    if remaining:
        print(f"hostnet-rdma: error: agents still running may write their condition again: once their pods are "
              f"gone, run `{CLEAR_COMMAND}` again", file=sys.stderr)  # fmt: skip
        code = 1
    return code


def cmd_fabric_watch(args: argparse.Namespace) -> int:
    if args.clear:
        return cmd_clear(args)
    if args.wait_for_agents:
        return error("--wait-for-agents goes with --clear")
    if args.timeout is not None:
        return error("--timeout goes with --clear (the agent's own probes are timed by --probe-timeout)")
    if not args.node:
        return error("--node (or NODE_NAME from the downward API) is required: the Node this agent reports on")
    if args.peer and not args.once:
        return error("--peer is for one round by hand (--once): the agent learns its peers from their reports")
    try:
        offline = parse_peers(args.peer)
    except ValueError as e:
        return error(str(e))
    if not args.once and not (args.namespace and args.service):
        return error(
            "--namespace and --service (the agents' headless Service) are required: the fleet is its endpoints"
        )
    per_round = by_hand_per_round(len(offline), args.peers_per_round)
    try:
        settings = fleet_agent.Settings(args.node, args.interval, args.heartbeat, per_round, args.taint)
    except ValueError as e:
        return error(str(e))
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")  # fmt: skip
    api: fleet_agent.NodeApi
    if offline:
        mtu = min((d.mtu for d in read_local(args).netdevs), default=1500)
        api = OfflineApi(args.node, offline, mtu)
    else:
        from app import kube

        api = kube.NodeAgentApi(kube.api_client(args.kubeconfig, args.context), args.namespace, args.service,
                                args.event_namespace)  # fmt: skip
    agent = fleet_agent.Agent(api, settings, lambda: read_local(args), lambda todo: probe(todo, args.probe_timeout))
    metrics = Metrics()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    served = False
    while True:
        began = time.monotonic()
        out = agent.round(dt.datetime.now(dt.UTC))
        took = time.monotonic() - began
        metrics.update(out, took)
        for failed in out.api_errors:
            log.warning("API server: %s (tried again next round)", failed)
        log.info("round %d: %s %s: %s (%d peers, %d sweeps, %.1f s)", out.round_number, out.condition.status,
                 out.condition.reason, out.condition.message, out.peers, len(out.paths), took)  # fmt: skip
        if args.once:
            print(json.dumps({"condition": out.condition.__dict__, "paths": [r.text() for r in out.paths],
                              "api_errors": out.api_errors}, indent=2))  # fmt: skip
            return 0 if out.condition.status == "False" else 1
        if not served and args.metrics_port:
            # Only after the first round: the pod turns Ready (a TCP probe of this port), and so joins
            # the fleet its peers probe, once it has looked at its own node.
            from prometheus_client import start_http_server

            start_http_server(args.metrics_port, registry=metrics.registry)
            served = True
        left = args.interval - (time.time() % args.interval)  # rounds on the wall clock: peers meet
        if stop.wait(left):
            return 0


def register(sub: Any) -> None:
    env = os.environ.get
    w = sub.add_parser("fabric-watch", help="the node agent: check this node and the paths to its peers, continuously")
    w.add_argument("--node", default=env("NODE_NAME", ""), help="this node's name (default $NODE_NAME)")
    w.add_argument("--namespace", default=env("POD_NAMESPACE", ""), help="the agents' namespace ($POD_NAMESPACE)")
    w.add_argument("--service", default=env("FABRIC_WATCH_SERVICE", ""),
                   help="the agents' headless Service: its endpoints are the fleet")  # fmt: skip
    w.add_argument("--interval", type=int, default=60, help="seconds between rounds (default 60)")
    w.add_argument("--heartbeat", type=int, default=300,
                   help="seconds between writes of an unchanged condition (default 300)")  # fmt: skip
    w.add_argument("--peers-per-round", type=int, default=2, help="peers probed each round (default 2)")
    w.add_argument("--taint", action="store_true", help=f"put {cond.TAINT_KEY}:NoSchedule on while degraded")
    w.add_argument("--require-rdma", action="store_true", help="a node without RDMA devices is degraded")
    w.add_argument("--expect-gpus", action="store_true", help="GPUDirect RDMA unavailable is degraded")
    w.add_argument("--netdev", action="append", default=[],
                   help="probe from this interface (repeat; default: the RDMA devices' netdevs, else the "
                        "default route's)")  # fmt: skip
    w.add_argument("--probe-timeout", type=float, default=1.0, help="seconds to wait for each echo (default 1)")
    w.add_argument("--metrics-port", type=int, default=9470, help="Prometheus metrics port (0: none; default 9470)")
    w.add_argument("--event-namespace", default="default", help="where the Node's Events go (default: default)")
    w.add_argument("--sysfs-root", default="/", help="read sys/ and proc/ under this directory")
    w.add_argument("--once", action="store_true", help="one round, print it as JSON, exit (1 when degraded)")
    w.add_argument("--peer", action="append", default=[], metavar="NAME=IP",
                   help="with --once: probe this peer (repeat), without the API server; nothing is written")  # fmt: skip
    w.add_argument("--clear", action="store_true",
                   help="take the fabric watch's condition, report annotation and taint off every Node, "
                        "everything else kept (after `helm uninstall --no-hooks`); one line per Node changed")  # fmt: skip
    w.add_argument("--wait-for-agents", metavar="NAMESPACE/SELECTOR",
                   help="with --clear: first wait until no pod of this selector is left (the agents)")  # fmt: skip
    w.add_argument("--timeout", type=float, default=None,
                   help=f"with --clear --wait-for-agents: seconds to wait for the agents (default {DEFAULT_AGENTS_TIMEOUT:g})")  # fmt: skip
    w.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    w.add_argument("--kubeconfig", help="kubeconfig (default: the pod's credentials)")
    w.add_argument("--context", help="kubeconfig context")
    w.set_defaults(func=cmd_fabric_watch)
