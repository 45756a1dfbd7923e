"""Two (or more) host-network "nodes" on this machine, like the seed's OKE nodes.

Each node is a network namespace (one veth pair links them) plus a UTS namespace with
its own host name. Each node's /etc/hosts (ip netns exec bind-mounts /etc/netns/<ns>/hosts)
maps its own name to 127.0.1.1, as Ubuntu nodes do, does NOT know the other node's name,
and maps the job's pod DNS names to the nodes' addresses, as cluster DNS with
ClusterFirstWithHostNet would. resolv.conf searches the namespace's zone first, as the kubelet
writes it for ClusterFirstWithHostNet (the wrapper derives a pod's full DNS name from it), and
points at a closed loopback port, so unknown names fail at once instead of timing out. All
traffic stays inside namespaces we made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# TEST-NET-1 (RFC 5737): documentation range, never routed; lives only on our veth pair.
SUBNET = "192.0.2"
# The pods' namespace and its DNS zone, as the kubelet puts it first in a pod's search list.
NAMESPACE = "default"
ZONE = f"{NAMESPACE}.svc.cluster.local"


def available() -> str | None:
    """None if the testbed can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"needs `{tool}`"
    return None


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@dataclass
class Node:
    name: str  # the node's host name, e.g. node-0
    netns: str
    address: str
    pods: list[str] = field(default_factory=list)  # pod DNS names resolving to this node


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class
    nodes: list[Node]
    extra_hosts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, count: int = 2) -> Testbed:
        tag = uuid.uuid4().hex[:6]
        nodes = [Node(f"node-{i}", f"hr{tag}n{i}", f"{SUBNET}.{10 + i}") for i in range(count)]
        bed = cls(nodes)
        try:
            # One bridge-less link: node-0 <-> node-1 over a veth pair (two nodes suffice).
            assert count == 2, "the testbed links exactly two nodes"
            for n in nodes:
                run("ip", "netns", "add", n.netns)
                run("ip", "-n", n.netns, "link", "set", "lo", "up")
            a, b = f"v{tag}a", f"v{tag}b"
            run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            for n, dev in zip(nodes, (a, b), strict=True):
                run("ip", "link", "set", dev, "netns", n.netns)
                run("ip", "-n", n.netns, "addr", "add", f"{n.address}/24", "dev", dev)
                run("ip", "-n", n.netns, "link", "set", dev, "up")
            bed.write_hosts()
        except Exception:
            bed.destroy()
            raise
        return bed

    def etc(self, node: Node) -> Path:
        return Path("/etc/netns") / node.netns

    def write_hosts(self) -> None:
        for node in self.nodes:
            lines = ["127.0.0.1 localhost", f"127.0.1.1 {node.name}"]
            for other in self.nodes:
                for pod in other.pods:
                    lines.append(f"{other.address} {pod}")
            lines += [f"{ip} {name}" for name, ip in self.extra_hosts.items()]
            d = self.etc(node)
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text("\n".join(lines) + "\n")
            (d / "resolv.conf").write_text(
                f"search {ZONE} svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
            )

    def add_pod(self, node: Node, *dns_names: str) -> None:
        node.pods.extend(dns_names)
        self.write_hosts()

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """argv run on that node: its network namespace, its own host name."""
        return [
            "ip", "netns", "exec", node.netns,
            "unshare", "--uts", "--",
            "sh", "-c", 'hostname "$0" && exec "$@"', node.name, *argv,
        ]  # fmt: skip

    def popen(self, node: Node, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        f = log.open("wb")
        return subprocess.Popen(
            self.command(node, argv), env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )

    def destroy(self) -> None:
        for node in self.nodes:
            subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True)
            subprocess.run(["ip", "netns", "del", node.netns], capture_output=True)
            shutil.rmtree(self.etc(node), ignore_errors=True)


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop a process group started by Testbed.popen."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
