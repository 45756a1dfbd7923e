"""A real multi-node Kubernetes cluster on this machine, without Docker (the `cluster` tier).

Like a two-node kind cluster, built from its parts:
- control plane in the host network namespace, listening only on a bridge we create: etcd
  (loopback), kube-apiserver (ServiceAccount, NodeRestriction, PodSecurity admission),
  kube-controller-manager, kube-scheduler, CoreDNS (cluster.local, no forwarding);
- per node: a network namespace on that bridge with its own UTS host name and mount namespace,
  running its own containerd, kubelet and kube-proxy (iptables). Each node's /etc/hosts maps
  its own name to 127.0.1.1 and knows no other node, like the seed's Ubuntu nodes, so
  torchrun's host-name decisions fail here exactly as they did there.

Addresses come from the benchmarking range 198.18.0.0/15 (RFC 2544), a fresh /24 pair per
run: nodes on 198.18.X.0/24, pods and Services in 198.19.X.0/24 (a blackhole route keeps any
stray packet on this machine). Nodes have no default route. Everything made is written to
`state.json` in the work directory first, so `down()` (also run for a dead run's leftovers)
removes processes, namespaces, links, routes, mounts and cgroups, and restores the host-wide
sysctls kubelet changes.

Usage outside pytest (as root):  python -m tests.cluster.harness up|down [WORKDIR]
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.webhook import tls

ROOT = Path(__file__).resolve().parents[2]
CGROUP_V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd")
# kubelet sets these host-wide (protectKernelDefaults: false); restored on teardown.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
CLUSTER_DOMAIN = "cluster.local"
API_PORT = 6443
STATE = "state.json"
WORK_PREFIX = "/tmp/hrc-"


def sh(*cmd: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, **kw)


def log(msg: str) -> None:
    sys.stderr.write(f"[cluster] {msg}\n")
    sys.stderr.flush()


def available() -> str | None:
    """None if the tier can run here, else why not (the tier fails on it; it never skips)."""
    if os.geteuid() != 0:
        return "needs root (network/mount namespaces, containerd, kubelet)"
    # containerd itself is built from the Go module proxy (scripts/testenv/build-binaries.sh).
    for tool in ("ip", "nsenter", "unshare", "runc", "buildah", "debootstrap", "iptables"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (scripts/testenv/install-system-deps.sh installs it)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "needs the CNI plugins in /usr/lib/cni (containernetworking-plugins)"
    return None


# ------------------------------------------------------------------------------- PKI


def _pem_key(key: Any) -> bytes:
    return bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def client_cert(ca: tls.Pair, common_name: str, org: str = "") -> tls.Pair:
    """A client certificate (kube-apiserver -> kubelet)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return tls.Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


# ------------------------------------------------------------------------------- layout


@dataclass
class Net:
    """One run's addresses: 198.18.X.0/24 for the bridge and nodes, 198.19.X.0/24 for pods and Services."""

    x: int
    nodes: int = 3  # up to 3: a /26 of pods each; up to 6: a /27 (30 pods) each

    @property
    def host_ip(self) -> str:
        return f"198.18.{self.x}.1"

    @property
    def dns_ip(self) -> str:
        return f"198.18.{self.x}.53"

    def node_ip(self, i: int) -> str:
        return f"198.18.{self.x}.{10 + i}"

    @property
    def inner(self) -> str:
        return f"198.19.{self.x}.0/24"

    @property
    def service_cidr(self) -> str:
        return f"198.19.{self.x}.0/26"

    @property
    def kubernetes_service_ip(self) -> str:
        return f"198.19.{self.x}.1"

    def pod_cidr(self, i: int) -> str:
        """Node i's pods (1-based), beside the Services' /26: a /26 each for up to 3 nodes, a /27
        each for up to 6."""
        if self.nodes > 6 or not 1 <= i <= self.nodes:
            raise ValueError(f"node {i} of {self.nodes}: the layout holds 6 nodes at most")
        return f"198.19.{self.x}.{64 * i}/26" if self.nodes <= 3 else f"198.19.{self.x}.{32 + 32 * i}/27"

    @staticmethod
    def pick(nodes: int = 3) -> Net:
        """A /24 pair no interface or route on this machine uses yet."""
        used = sh("ip", "-o", "addr").stdout + sh("ip", "route", "show", "table", "all").stdout
        choices = list(range(1, 255))
        random.shuffle(choices)
        for x in choices:
            if f"198.18.{x}." not in used and f"198.19.{x}." not in used:
                return Net(x, nodes)
        raise RuntimeError("no free 198.18.X.0/24 for the test cluster")


@dataclass
class State:
    """What up() made, written before it is made, so teardown can always find it."""

    tag: str
    workdir: str
    owner_pid: int
    net_x: int
    nodes: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    bridge: str = ""
    routes: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    cgroups: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    firewall: list[str] = field(default_factory=list)  # iptables rules added (silent_large_frame_drop)


# ------------------------------------------------------------------------------- cluster


class Cluster:
    def __init__(self, workdir: Path, bin_dir: Path, image_dir: Path, nodes: int = 2) -> None:
        self.workdir = workdir
        self.bin = bin_dir
        self.images = image_dir
        self.node_count = nodes
        tag = secrets.token_hex(2)
        self.net = Net.pick(nodes)
        self.state = State(tag=tag, workdir=str(workdir), owner_pid=os.getpid(), net_x=self.net.x)
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.timings: dict[str, float] = {}
        self.pki = workdir / "pki"
        self.logs = workdir / "logs"
        self.token = secrets.token_hex(16)

    @classmethod
    def attach(cls, workdir: Path, bin_dir: Path, image_dir: Path) -> Cluster:
        """A handle on a cluster that `up` left running (manual use: `harness up`)."""
        st = State(**json.loads((workdir / STATE).read_text()))
        c = cls.__new__(cls)
        c.workdir, c.bin, c.images, c.node_count = workdir, bin_dir, image_dir, len(st.nodes)
        c.net, c.state, c.nodes, c.timings = Net(st.net_x, len(st.nodes)), st, list(st.nodes), {}
        c.pki, c.logs = workdir / "pki", workdir / "logs"
        c.token = (workdir / "kc-admin.yaml").read_text().split("token: '")[1].split("'")[0]
        return c

    # ---- bookkeeping

    def save(self) -> None:
        (self.workdir / STATE).write_text(json.dumps(asdict(self.state), indent=1))

    @property
    def api_url(self) -> str:
        return f"https://{self.net.host_ip}:{API_PORT}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kc-admin.yaml"

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin}:{os.environ.get('PATH', '')}"}

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None) -> str:
        p = subprocess.run(
            [str(self.bin / "kubectl"), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            input=stdin,
        )
        if check and p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = (self.logs / f"{name}.log").open("wb")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.state.pids[name] = p.pid
        self.save()
        return p

    def mark(self, what: str, since: float) -> None:
        self.timings[what] = round(time.monotonic() - since, 2)
        log(f"{what}: {self.timings[what]}s")

    # ---- up

    def up(self) -> None:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.save()
        self._pki()
        self._network()
        self._control_plane()
        self.mark("control plane ready", t0)
        t1 = time.monotonic()
        for i, node in enumerate(self.nodes, start=1):
            self._node(i, node)
        self._import_images()
        self._wait_nodes_ready()
        self.mark("nodes ready", t1)
        self._wait(lambda: self.kubectl("get", "sa", "default", "-n", "default", check=False) != "", 60, "default SA")
        self.mark("cluster up", t0)

    def _pki(self) -> None:
        self.pki.mkdir(exist_ok=True)
        ca = tls.make_ca("hostnet-rdma-test-cluster-ca")
        self.ca = ca
        (self.pki / "ca.crt").write_bytes(ca.cert_pem)
        api_names = [
            self.net.host_ip,
            self.net.kubernetes_service_ip,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
        ]
        serving = tls.make_serving(ca, api_names)
        (self.pki / "apiserver.crt").write_bytes(serving.cert_pem)
        (self.pki / "apiserver.key").write_bytes(serving.key_pem)
        kc = client_cert(ca, "kube-apiserver-kubelet-client", "system:masters")
        (self.pki / "kubelet-client.crt").write_bytes(kc.cert_pem)
        (self.pki / "kubelet-client.key").write_bytes(kc.key_pem)
        # The aggregation layer, as kubeadm sets it up: its own CA and a front-proxy client
        # (Kueue's visibility API is an APIService; without this it is never available, and
        # the namespace controller cannot finish deleting a namespace).
        front = tls.make_ca("hostnet-rdma-test-front-proxy-ca")
        (self.pki / "front-proxy-ca.crt").write_bytes(front.cert_pem)
        fp = client_cert(front, "front-proxy-client", "")
        (self.pki / "front-proxy-client.crt").write_bytes(fp.cert_pem)
        (self.pki / "front-proxy-client.key").write_bytes(fp.key_pem)
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.pki / "sa.key").write_bytes(_pem_key(sa))
        # The static token file is read once: every identity's token exists before start.
        users = {
            "admin": ("admin", "system:masters"),
            "kcm": ("system:kube-controller-manager", ""),
            "scheduler": ("system:kube-scheduler", ""),
            "proxy": ("system:kube-proxy", ""),
            **{n: (f"system:node:{n}", "system:nodes") for n in self.nodes},
        }
        lines = []
        self.tokens: dict[str, str] = {}
        for key, (user, group) in users.items():
            token = self.token if key == "admin" else secrets.token_hex(16)
            self.tokens[key] = token
            lines.append(f'{token},{user},{user},"{group}"' if group else f"{token},{user},{user}")
            self._write_kubeconfig(self.workdir / f"kc-{key}.yaml", token)
        (self.pki / "tokens.csv").write_text("\n".join(lines) + "\n")

    def _write_kubeconfig(self, path: Path, token: str) -> None:
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: hrc\n"
            f"clusters: [{{name: hrc, cluster: {{server: '{self.api_url}', certificate-authority: '{self.pki / 'ca.crt'}'}}}}]\n"
            f"users: [{{name: u, user: {{token: '{token}'}}}}]\n"
            "contexts: [{name: hrc, context: {cluster: hrc, user: u}}]\n"
        )

    def _network(self) -> None:
        net, st = self.net, self.state
        st.bridge = f"hrc{st.tag}br"
        self.save()
        sh("ip", "link", "add", st.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{net.host_ip}/24", "dev", st.bridge)
        sh("ip", "addr", "add", f"{net.dns_ip}/32", "dev", st.bridge)
        sh("ip", "link", "set", st.bridge, "up")
        # Pod and Service addresses never leave this machine, even if something misroutes.
        st.routes.append(f"blackhole {net.inner}")
        self.save()
        sh("ip", "route", "add", "blackhole", net.inner)
        for i, node in enumerate(self.nodes, start=1):
            ns = f"hrc{st.tag}{node}"
            st.netns.append(ns)
            st.nodes.append(node)
            self.save()
            sh("ip", "netns", "add", ns)
            host_if, node_if = f"hrc{st.tag}v{i}", "eth0"
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if, "netns", ns)
            sh("ip", "link", "set", host_if, "master", st.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", f"{net.node_ip(i)}/24", "dev", node_if)
            sh("ip", "-n", ns, "link", "set", node_if, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            # Service IPs need a route for kube-proxy's OUTPUT DNAT (hostNetwork clients);
            # the host blackholes whatever kube-proxy did not rewrite.
            sh("ip", "-n", ns, "route", "add", net.service_cidr, "via", net.host_ip)
            route = f"{net.pod_cidr(i)} via {net.node_ip(i)}"
            st.routes.append(route)
            self.save()
            sh("ip", "route", "add", *route.split())  # API server -> pods (webhook, probes)
        for i, _node in enumerate(self.nodes, start=1):
            for j, _other in enumerate(self.nodes, start=1):
                if i != j:
                    sh("ip", "-n", st.netns[i - 1], "route", "add", net.pod_cidr(j), "via", net.node_ip(j))

    def _wait(self, ok: Any, timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ok():
                    return
            except Exception:
                pass
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what}: process exited ({proc.returncode}); see {self.logs}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not ready within {timeout}s; see {self.logs}")
            time.sleep(0.25)

    def _control_plane(self) -> None:
        net, pki, b = self.net, self.pki, self.bin
        etcd_port, peer_port = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.spawn("etcd", [
            str(b / "etcd"), "--name=hrc", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=hrc=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync",
            # The etcd-v2 rendezvous variant of the seed needs the v2 API.
            "--enable-v2",
        ])  # fmt: skip
        api = self.spawn("kube-apiserver", [
            str(b / "kube-apiserver"), f"--etcd-servers={self.etcd_url}",
            f"--bind-address={net.host_ip}", f"--advertise-address={net.host_ip}", f"--secure-port={API_PORT}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.key'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={net.service_cidr}",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            # The defaults (ServiceAccount, webhooks, ...) plus these, as on a kubeadm cluster.
            "--enable-admission-plugins=NodeRestriction,PodSecurity",
            "--allow-privileged=true",
            # The node name resolves to nothing useful from here: dial kubelets by InternalIP.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            # Dial webhook Services at their endpoints: the host runs no kube-proxy.
            "--enable-aggregator-routing=true",
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--profiling=false",
        ])  # fmt: skip

        def ready() -> bool:
            p = sh("curl", "-sf", "--max-time", "2", "--cacert", str(pki / "ca.crt"),
                   "-H", f"Authorization: Bearer {self.token}", f"{self.api_url}/readyz", check=False)  # fmt: skip
            return p.stdout.strip() == "ok"

        self._wait(ready, 90, "kube-apiserver", api)
        self.spawn("kube-controller-manager", [
            str(b / "kube-controller-manager"), f"--kubeconfig={self.workdir / 'kc-kcm.yaml'}",
            f"--authentication-kubeconfig={self.workdir / 'kc-kcm.yaml'}",
            f"--authorization-kubeconfig={self.workdir / 'kc-kcm.yaml'}",
            "--bind-address=127.0.0.1", "--secure-port=0",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=true", "--leader-elect=false",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
        ])  # fmt: skip
        self.spawn("kube-scheduler", [
            str(b / "kube-scheduler"), f"--kubeconfig={self.workdir / 'kc-scheduler.yaml'}",
            f"--authentication-kubeconfig={self.workdir / 'kc-scheduler.yaml'}",
            f"--authorization-kubeconfig={self.workdir / 'kc-scheduler.yaml'}",
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
        ])  # fmt: skip
        corefile = self.workdir / "Corefile"
        corefile.write_text(
            f"{CLUSTER_DOMAIN}:53 {{\n  bind {net.dns_ip}\n  errors\n"
            f"  kubernetes {CLUSTER_DOMAIN} {{\n    kubeconfig {self.kubeconfig} hrc\n    pods insecure\n  }}\n}}\n"
            # Nothing is forwarded: every other name fails at once, on this machine.
            f".:53 {{\n  bind {net.dns_ip}\n  template ANY ANY {{\n    rcode NXDOMAIN\n  }}\n}}\n"
        )
        self.spawn("coredns", [str(b / "coredns"), "-conf", str(corefile)])

    def _node(self, i: int, node: str) -> None:
        net, st = self.net, self.state
        ns = st.netns[i - 1]
        d = self.workdir / node
        for sub in ("containerd/root", "containerd/state", "cni", "kubelet", "pod-logs", "cni-ipam", "cdi-specs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        sock = d / "containerd" / "containerd.sock"
        (d / "containerd" / "config.toml").write_text(
            f'version = 3\nroot = "{d}/containerd/root"\nstate = "{d}/containerd/state"\nimports = []\n'
            f'[grpc]\n  address = "{sock}"\n'
            "[plugins.'io.containerd.cri.v1.images']\n"
            '  snapshotter = "overlayfs"\n'
            "  [plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
            '    sandbox = "localhost/pause:1"\n'
            "[plugins.'io.containerd.cri.v1.runtime']\n"
            # runc cannot raise oom_score_adj here (no CAP_SYS_RESOURCE in this sandbox).
            "  restrict_oom_score_adj = true\n"
            # Pod network namespaces under the node's state dir, not the host's /run/netns.
            "  netns_mounts_under_state_dir = true\n"
            # CDI specs (a DRA driver's devices, tests/cluster/test_allocators.py) per node.
            f'  cdi_spec_dirs = ["{d}/cdi-specs"]\n'
            "  [plugins.'io.containerd.cri.v1.runtime'.containerd]\n"
            '    default_runtime_name = "runc"\n'
            "    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
            '      runtime_type = "io.containerd.runc.v2"\n'
            "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n"
            '        SystemdCgroup = false\n        BinaryName = "/usr/sbin/runc"\n'
            "  [plugins.'io.containerd.cri.v1.runtime'.cni]\n"
            f'    bin_dirs = ["/usr/lib/cni"]\n    conf_dir = "{d}/cni"\n'
            "[plugins.'io.containerd.grpc.v1.cri']\n"
            '  stream_server_address = "127.0.0.1"\n'
        )
        # The node is NotReady until CNI is configured, even for hostNetwork-only pods.
        (d / "cni" / "10-hrc.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": f"hrc-{node}",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": net.pod_cidr(i)}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(d / "cni-ipam")}},
                {"type": "loopback"},
            ],
        }))  # fmt: skip
        cgroup = f"hrc-{st.tag}-{node}"
        for ctrl in CGROUP_V1:
            path = Path("/sys/fs/cgroup") / ctrl / cgroup
            st.cgroups.append(str(path))
            self.save()
            path.mkdir(exist_ok=True)
        cpuset = Path("/sys/fs/cgroup/cpuset")
        for f in ("cpuset.cpus", "cpuset.mems"):
            (cpuset / cgroup / f).write_text((cpuset / f).read_text())
        (d / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        (d / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {node}\n")
        (d / "kubelet.yaml").write_text(f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
address: {net.node_ip(i)}
port: 10250
readOnlyPort: 0
healthzPort: 0
staticPodPath: ""
resolvConf: {d / "resolv.conf"}
clusterDNS: ["{net.dns_ip}"]
clusterDomain: {CLUSTER_DOMAIN}
podLogsDir: {d / "pod-logs"}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {self.pki / "ca.crt"}}}
authorization: {{mode: AlwaysAllow}}
enforceNodeAllocatable: []
evictionHard: {{}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
serializeImagePulls: false
registerNode: true
""")
        (d / "kube-proxy.yaml").write_text(f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {self.workdir / "kc-proxy.yaml"}}}
hostnameOverride: {node}
mode: iptables
clusterCIDR: {net.inner}
# Same-node Service hairpins need the reply to come back through the node.
iptables: {{masqueradeAll: true, localhostNodePorts: false}}
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
""")
        if not st.sysctls:
            st.sysctls = {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS}
            self.save()
        b = self.bin
        # One shell per node: its own UTS name and mount namespace (so the bind-mounted
        # /etc/hosts, and kubelet's and containerd's mounts, belong to this node only).
        script = f"""set -e
mount --bind {d / "hosts"} /etc/hosts
hostname {node}
# The kubelet's device-plugin socket is always /var/lib/kubelet/device-plugins/kubelet.sock,
# whatever --root-dir says (pkg/kubelet/cm/devicemanager/manager.go): one per node.
mkdir -p /var/lib/kubelet/device-plugins {d / "device-plugins"}
mount --bind {d / "device-plugins"} /var/lib/kubelet/device-plugins
PATH={b}:$PATH {b / "containerd"} --config {d / "containerd" / "config.toml"} >{self.logs / f"{node}-containerd.log"} 2>&1 &
echo $! >{d / "containerd.pid.tmp"} && mv {d / "containerd.pid.tmp"} {d / "containerd.pid"}
for i in $(seq 100); do [ -S {sock} ] && break; sleep 0.1; done
{b / "kubelet"} --config={d / "kubelet.yaml"} --kubeconfig={self.workdir / f"kc-{node}.yaml"} \\
  --root-dir={d / "kubelet"} --cert-dir={d / "kubelet" / "pki"} --hostname-override={node} \\
  --node-ip={net.node_ip(i)} --v=1 >{self.logs / f"{node}-kubelet.log"} 2>&1 &
echo $! >{d / "kubelet.pid.tmp"} && mv {d / "kubelet.pid.tmp"} {d / "kubelet.pid"}
{b / "kube-proxy"} --config={d / "kube-proxy.yaml"} >{self.logs / f"{node}-kube-proxy.log"} 2>&1 &
echo $! >{d / "kube-proxy.pid.tmp"} && mv {d / "kube-proxy.pid.tmp"} {d / "kube-proxy.pid"}
wait
"""
        self.spawn(f"{node}-init", [
            "nsenter", f"--net=/run/netns/{ns}", "--",
            "unshare", "--uts", "--mount", "--propagation", "slave", "--", "sh", "-c", script,
        ])  # fmt: skip
        self._wait(sock.exists, 30, f"{node} containerd")
        for f in ("containerd", "kubelet", "kube-proxy"):
            pid_file = d / f"{f}.pid"
            # The shell renames a whole file into place: a bare `>` redirect would show an
            # empty file for a moment (CI once read it then, and every launcher test errored).
            self._wait(pid_file.exists, 10, f"{node} {f} pid")
            self.state.pids[f"{node}-{f}"] = int(pid_file.read_text())
        self.save()

    def node_dir(self, node: str) -> Path:
        return self.workdir / node

    @contextlib.contextmanager
    def silent_large_frame_drop(self) -> Iterator[None]:
        """The field report's OVS-DOCA failure, built in: the nodes' links and the bridge between
        them (their switch) at MTU 9000 end to end, as the nodes see them, and the switch dropping
        every frame over 1500 bytes that goes from one node to another: no ICMP, no counter on the
        nodes' own interfaces (bridge netfilter in the host; ../shared/recipes/mtu-blackhole).
        Everything is as before once it is left."""
        tag = self.state.tag
        ports = [f"hrc{tag}v{i}" for i in range(1, len(self.nodes) + 1)]
        rules = [f"FORWARD -m physdev --physdev-in {a} --physdev-out {b} -m length --length 1501:65535 -j DROP"
                 for a in ports for b in ports if a != b]  # fmt: skip
        self.state.firewall += rules
        self.save()
        try:
            for port in ports:
                sh("ip", "link", "set", port, "mtu", "9000")
            sh("ip", "link", "set", self.state.bridge, "mtu", "9000")
            for ns in self.state.netns:
                sh("ip", "-n", ns, "link", "set", "eth0", "mtu", "9000")
            for rule in rules:
                sh("iptables", "-I", *rule.split())
            yield
        finally:
            for rule in rules:
                sh("iptables", "-D", *rule.split(), check=False)
            for ns in self.state.netns:
                sh("ip", "-n", ns, "link", "set", "eth0", "mtu", "1500", check=False)
            for port in ports:
                sh("ip", "link", "set", port, "mtu", "1500", check=False)
            sh("ip", "link", "set", self.state.bridge, "mtu", "1500", check=False)
            self.state.firewall = [r for r in self.state.firewall if r not in rules]
            self.save()

    @property
    def infiniband(self) -> Path:
        """The nodes' stand-in for /dev/infiniband (config.inject.infinibandPath must be under
        /dev): a directory of this run's, in the host's /dev the nodes share; removed at teardown."""
        return infiniband_dir(self.state.tag)

    def _import_images(self) -> None:
        t0 = time.monotonic()
        procs = []
        for node in self.nodes:
            sock = self.node_dir(node) / "containerd" / "containerd.sock"
            for tar in ("pause.tar", "webhook.tar", "wrapper.tar", "train.tar"):
                procs.append(subprocess.Popen(
                    [str(self.bin / "ctr"), "-a", str(sock), "-n", "k8s.io", "images", "import", str(self.images / tar)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                ))  # fmt: skip
        for p in procs:
            _, err = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"ctr images import failed: {err.decode()[-2000:]}")
        self.mark("images imported", t0)

    def import_image(self, tar: Path) -> None:
        """Import one more docker-archive image into every node's containerd."""
        for node in self.nodes:
            sock = self.node_dir(node) / "containerd" / "containerd.sock"
            sh(str(self.bin / "ctr"), "-a", str(sock), "-n", "k8s.io", "images", "import", str(tar))

    def _wait_nodes_ready(self) -> None:
        def ready() -> bool:
            nodes = self.kubectl_json("get", "nodes")["items"]
            ok = [
                n for n in nodes
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            ]  # fmt: skip
            return len(ok) == len(self.nodes)

        self._wait(ready, 120, "nodes Ready")

    # ---- down

    def down(self) -> None:
        teardown(self.state)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pids: list[int], grace: float) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cgroup_pids(path: Path) -> list[int]:
    found: list[int] = []
    if not path.exists():
        return found
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            found += [int(x) for x in procs.read_text().split()]
    return found


def _netns_pids(ns: str) -> list[int]:
    p = sh("ip", "netns", "pids", ns, check=False)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []


def infiniband_dir(tag: str) -> Path:
    return Path("/dev") / f"hrc{tag}-infiniband"


def hostdev_dir(tag: str) -> Path:
    """The nodes' NIC device nodes that the test allocators hand out (tests/cluster/allocators/):
    a directory of this run's in the host's /dev; removed at teardown."""
    return Path("/dev") / f"hrc{tag}-hostdev"


def teardown(st: State) -> None:
    """Remove everything `st` records, in dependency order. Safe to run twice."""
    t0 = time.monotonic()
    # kubelets first (they would restart containers), then everything on each node:
    # containerd, shims and container processes (by netns and by the node's cgroups).
    node_pids = [pid for name, pid in st.pids.items() if name.endswith(("-kubelet", "-kube-proxy", "-plugin"))]
    _kill(node_pids, 5)
    for _ in range(5):
        victims = [p for ns in st.netns for p in _netns_pids(ns)]
        victims += [p for cg in st.cgroups for p in _cgroup_pids(Path(cg))]
        victims += [pid for name, pid in st.pids.items() if name.endswith(("-init", "-containerd"))]
        victims = [p for p in set(victims) if p != os.getpid() and _alive(p)]
        if not victims:
            break
        _kill(victims, 3)
    control = [st.pids[n] for n in ("coredns", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
               if n in st.pids]  # fmt: skip
    _kill(control, 10)
    # Restore what kubelet changed host-wide.
    for key, value in st.sysctls.items():
        with contextlib.suppress(OSError):
            Path("/proc/sys", key).write_text(value)
    # Anything mounted under the work dir in this mount namespace (none expected: node
    # mounts live and die in the nodes' own mount namespaces).
    for _ in range(3):
        mounts = sh("findmnt", "-rn", "-o", "TARGET", check=False).stdout.split()
        ours = sorted((m for m in mounts if m.startswith(st.workdir + "/")), reverse=True)
        if not ours:
            break
        for m in ours:
            if sh("umount", m, check=False).returncode != 0:
                sh("umount", "-l", m, check=False)
    with contextlib.suppress(OSError):
        infiniband_dir(st.tag).rmdir()
    shutil.rmtree(hostdev_dir(st.tag), ignore_errors=True)
    for rule in st.firewall:
        sh("iptables", "-D", *rule.split(), check=False)
    for route in st.routes:
        sh("ip", "route", "del", *route.split(), check=False)
    for ns in st.netns:
        sh("ip", "netns", "del", ns, check=False)
    if st.bridge:
        sh("ip", "link", "del", st.bridge, check=False)
    # Leftover host-side veths (deleted with their netns normally).
    for line in sh("ip", "-o", "link", check=False).stdout.splitlines():
        name = line.split(": ")[1].split("@")[0] if ": " in line else ""
        if name.startswith(f"hrc{st.tag}"):
            sh("ip", "link", "del", name, check=False)
    for cg in st.cgroups:
        path = Path(cg)
        if path.exists():
            for d in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                path.rmdir()
    shutil.rmtree(st.workdir, ignore_errors=True)
    log(f"teardown of {st.tag} in {time.monotonic() - t0:.1f}s")


def leftovers(st: State) -> list[str]:
    """What of `st` still exists (empty after a clean teardown)."""
    left: list[str] = []
    netns = sh("ip", "netns", "list", check=False).stdout
    left += [f"netns {ns}" for ns in st.netns if ns in netns.split()]
    links = sh("ip", "-o", "link", check=False).stdout
    if st.bridge and f" {st.bridge}:" in links:
        left.append(f"bridge {st.bridge}")
    left += [f"cgroup {cg}" for cg in st.cgroups if Path(cg).exists()]
    left += [f"process {name} ({pid})" for name, pid in st.pids.items() if _alive(pid) and _is_ours(pid, st)]
    mounts = sh("findmnt", "-rn", "-o", "TARGET", check=False).stdout.split()
    left += [f"mount {m}" for m in mounts if m.startswith(st.workdir + "/")]
    if hostdev_dir(st.tag).exists():
        left.append(f"device nodes {hostdev_dir(st.tag)}")
    routes = sh("ip", "route", "show", "table", "all", check=False).stdout
    if f"198.19.{st.net_x}." in routes:
        left.append(f"routes to 198.19.{st.net_x}.0/24")
    for key, value in st.sysctls.items():
        now = Path("/proc/sys", key).read_text().strip()
        if now != value:
            left.append(f"sysctl {key}={now} (was {value})")
    return left


def _is_ours(pid: int, st: State) -> bool:
    """A recorded PID may have been reused by an unrelated process after we killed ours."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return st.workdir in cmd or any(k in cmd for k in ("kube-", "etcd", "coredns", "containerd", "kubelet"))


def cleanup_stale() -> None:
    """Tear down clusters of earlier runs whose owner died without cleaning up."""
    for state_file in Path("/tmp").glob("hrc-*/" + STATE):
        with contextlib.suppress(Exception):
            st = State(**json.loads(state_file.read_text()))
            if not _alive(st.owner_pid):
                log(f"removing leftovers of an earlier run: {st.workdir}")
                teardown(st)


def binaries() -> Path:
    out = sh("bash", str(ROOT / "scripts" / "testenv" / "build-binaries.sh"))
    return Path(out.stdout.strip().splitlines()[-1])


def build_images() -> Path:
    p = subprocess.run(["bash", str(ROOT / "scripts" / "testenv" / "build-images.sh")], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("building the cluster images failed:\n" + p.stderr[-4000:])
    return Path(p.stdout.strip().splitlines()[-1])


def new_workdir() -> Path:
    return Path(WORK_PREFIX + secrets.token_hex(3))


if __name__ == "__main__":  # pragma: no cover - manual use
    what = sys.argv[1] if len(sys.argv) > 1 else "up"
    if what == "down":
        target = Path(sys.argv[2]) if len(sys.argv) > 2 else None
        files = [target / STATE] if target else list(Path("/tmp").glob("hrc-*/" + STATE))
        for f in files:
            teardown(State(**json.loads(f.read_text())))
    else:
        cleanup_stale()
        c = Cluster(new_workdir(), binaries(), build_images())
        try:
            c.up()
        except Exception:
            c.down()
            raise
        # Keep the cluster for manual use; down with: python -m tests.cluster.harness down WORKDIR
        c.state.owner_pid = 1
        c.save()
        print(f"KUBECONFIG={c.kubeconfig}  workdir={c.workdir}")
