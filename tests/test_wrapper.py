"""Unit tests of the in-container wrapper: argv merging (table-driven), preflight messages,
interface lookup, dry run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.wrapper import torchrun as w

ROOT = Path(__file__).resolve().parent.parent

VOLCANO = {
    "HOSTNET_RDMA_LAUNCHER": "volcano",
    "HOSTNET_RDMA_LOCAL_ADDR": "j-worker-1.j",
    "HOSTNET_RDMA_IDENTITIES": "j-worker-1,j-worker-1.j,j-worker-1.j.ns,j-worker-1.j.ns.svc,j-worker-1.j.ns.svc.cluster.local",
    "HOSTNET_RDMA_RDZV_ID": "j-uid",
    "HOSTNET_RDMA_RDZV_BACKEND": "c10d",
    "HOSTNET_RDMA_RDZV_ENDPOINT": "j-worker-0.j:23456",
    "HOSTNET_RDMA_NNODES": "${VC_MASTER_NUM}+${VC_WORKER_NUM}",
    "VC_MASTER_NUM": "1",
    "VC_WORKER_NUM": "2",
}
WORKER0 = {
    **VOLCANO,
    "HOSTNET_RDMA_LOCAL_ADDR": "j-worker-0.j",
    "HOSTNET_RDMA_IDENTITIES": "j-worker-0,j-worker-0.j,j-worker-0.j.ns,j-worker-0.j.ns.svc",
}
# Training Operator: the operator's PET_* env carries endpoint/backend/nnodes.
PTJ = {
    "HOSTNET_RDMA_LAUNCHER": "pytorchjob",
    "HOSTNET_RDMA_LOCAL_ADDR": "p-worker-0",
    "HOSTNET_RDMA_IDENTITIES": "p-worker-0,p-worker-0.ns,p-worker-0.ns.svc,p-worker-0.ns.svc.cluster.local",
    "HOSTNET_RDMA_RDZV_ID": "p-uid",
    "PET_RDZV_ENDPOINT": "p-worker-0:23456",
    "PET_RDZV_BACKEND": "c10d",
    "PET_NNODES": "2:2",
}
PTJ_MASTER = {**PTJ, "HOSTNET_RDMA_LOCAL_ADDR": "p-master-0", "HOSTNET_RDMA_IDENTITIES": "p-master-0,p-master-0.ns"}

# Every value given by the user, in the space-separated spelling: nothing may change.
USER_GAVE_EVERYTHING = [
    *("--rdzv-backend", "c10d", "--rdzv-endpoint", "other:1", "--nnodes", "4", "--rdzv-id", "mine"),
    *("--local-addr", "me.example", "--rdzv-conf", "is_host=false", "train.py"),
]

# What the wrapper prepends for Volcano worker-1 when the user gave nothing.
WORKER1_DEFAULTS = [
    *("--rdzv-backend=c10d", "--rdzv-endpoint=j-worker-0.j:23456", "--nnodes=3", "--rdzv-id=j-uid"),
    *("--local-addr=j-worker-1.j", "--rdzv-conf=is_host=false"),
]

CASES = [
    # (id, argv, env, expected argv)
    (
        "volcano-defaults-worker-1",
        ["--nproc-per-node=8", "train.py"],
        VOLCANO,
        [
            *WORKER1_DEFAULTS,
            "--nproc-per-node=8",
            "train.py",
        ],
    ),
    (
        "volcano-defaults-worker-0-hosts",
        ["train.py"],
        WORKER0,
        [
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=j-worker-0.j:23456",
            "--nnodes=3",
            "--rdzv-id=j-uid",
            "--local-addr=j-worker-0.j",
            "--rdzv-conf=is_host=true",
            "train.py",
        ],
    ),
    (
        "user-values-win",
        USER_GAVE_EVERYTHING,
        WORKER0,
        USER_GAVE_EVERYTHING,
    ),
    (
        "underscore-spellings",
        [
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=j-worker-0.j.ns.svc:1",
            "--rdzv_conf=timeout=900",
            "--local_addr=x",
            "train.py",
        ],
        WORKER0,
        [
            "--nnodes=3",
            "--rdzv-id=j-uid",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=j-worker-0.j.ns.svc:1",
            "--rdzv_conf=timeout=900,is_host=true",
            "--local_addr=x",
            "train.py",
        ],
    ),
    (
        "rdzv-id-none-replaced",
        ["--rdzv-id", "none", "train.py"],
        VOLCANO,
        [
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=j-worker-0.j:23456",
            "--nnodes=3",
            "--local-addr=j-worker-1.j",
            "--rdzv-conf=is_host=false",
            "--rdzv-id",
            "j-uid",
            "train.py",
        ],
    ),
    (
        "script-args-untouched",
        ["train.py", "--local-addr", "keep", "--rdzv-id=none"],
        VOLCANO,
        [
            *WORKER1_DEFAULTS,
            "train.py",
            "--local-addr",
            "keep",
            "--rdzv-id=none",
        ],
    ),
    (
        "static-master-addr-left-alone",
        ["--master-addr=m", "--node-rank=1", "--nnodes=2", "train.py"],
        VOLCANO,
        ["--master-addr=m", "--node-rank=1", "--nnodes=2", "train.py"],
    ),
    ("static-env-left-alone", ["train.py"], {**VOLCANO, "PET_MASTER_ADDR": "m", "PET_NODE_RANK": "0"}, ["train.py"]),
    (
        "explicit-static-left-alone",
        ["--rdzv-backend=static", "train.py"],
        VOLCANO,
        ["--rdzv-backend=static", "train.py"],
    ),
    (
        "standalone-left-alone",
        ["--standalone", "--nproc-per-node=2", "train.py"],
        VOLCANO,
        ["--standalone", "--nproc-per-node=2", "train.py"],
    ),
    (
        "pytorchjob-worker-0-hosts-from-pet-env",
        ["--nproc-per-node=8", "train.py"],
        PTJ,
        ["--rdzv-id=p-uid", "--local-addr=p-worker-0", "--rdzv-conf=is_host=true", "--nproc-per-node=8", "train.py"],
    ),
    (
        "pytorchjob-master-0-does-not-host",
        ["train.py"],
        PTJ_MASTER,
        ["--rdzv-id=p-uid", "--local-addr=p-master-0", "--rdzv-conf=is_host=false", "train.py"],
    ),
    (
        "pet-rdzv-conf-carried-over",
        ["train.py"],
        {**PTJ, "PET_RDZV_CONF": "read_timeout=120"},
        ["--rdzv-id=p-uid", "--local-addr=p-worker-0", "--rdzv-conf=read_timeout=120,is_host=true", "train.py"],
    ),
    (
        "pet-is-host-kept",
        ["train.py"],
        {**PTJ, "PET_RDZV_CONF": "is_host=false"},
        ["--rdzv-id=p-uid", "--local-addr=p-worker-0", "train.py"],
    ),
    (
        "pet-local-addr-kept",
        ["train.py"],
        {**PTJ, "PET_LOCAL_ADDR": "mine"},
        ["--rdzv-id=p-uid", "--rdzv-conf=is_host=true", "train.py"],
    ),
    (
        "pet-rdzv-id-none-overridden",
        ["train.py"],
        {**PTJ, "PET_RDZV_ID": "none"},
        ["--rdzv-id=p-uid", "--local-addr=p-worker-0", "--rdzv-conf=is_host=true", "train.py"],
    ),
    (
        "etcd-no-is-host",
        ["--rdzv-backend=etcd-v2", "--rdzv-endpoint=etcd:2379", "train.py"],
        VOLCANO,
        [
            "--nnodes=3",
            "--rdzv-id=j-uid",
            "--local-addr=j-worker-1.j",
            "--rdzv-backend=etcd-v2",
            "--rdzv-endpoint=etcd:2379",
            "train.py",
        ],
    ),
    (
        "module-flag",
        ["-m", "--nnodes=2", "pkg.train", "--x"],
        PTJ,
        [
            "--rdzv-id=p-uid",
            "--local-addr=p-worker-0",
            "--rdzv-conf=is_host=true",
            "-m",
            "--nnodes=2",
            "pkg.train",
            "--x",
        ],
    ),
    (
        "lws-endpoint-from-runtime-env",
        ["train.py"],
        {
            "HOSTNET_RDMA_RDZV_BACKEND": "c10d",
            "HOSTNET_RDMA_RDZV_ENDPOINT": "${LWS_LEADER_ADDRESS}:23456",
            "HOSTNET_RDMA_NNODES": "${LWS_GROUP_SIZE}",
            "LWS_LEADER_ADDRESS": "llm-0.llm.default",
            "LWS_GROUP_SIZE": "2",
            "HOSTNET_RDMA_LOCAL_ADDR": "llm-0.llm",
            "HOSTNET_RDMA_IDENTITIES": "llm-0,llm-0.llm,llm-0.llm.default",
        },
        [
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=llm-0.llm.default:23456",
            "--nnodes=2",
            "--local-addr=llm-0.llm",
            "--rdzv-conf=is_host=true",
            "train.py",
        ],
    ),
    (
        "loopback-endpoint-is-host-left-to-torchrun",
        ["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", "t.py"],
        {**VOLCANO, "HOSTNET_RDMA_NNODES": "1"},
        [
            "--nnodes=1",
            "--rdzv-id=j-uid",
            "--local-addr=j-worker-1.j",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=localhost:29400",
            "t.py",
        ],
    ),
    ("no-webhook-env-no-change", ["--nnodes=2", "train.py"], {}, ["--nnodes=2", "train.py"]),
    ("help-untouched", ["--help"], VOLCANO, ["--help"]),
]


@pytest.mark.parametrize(("argv", "env", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_merge(argv: list[str], env: dict[str, str], want: list[str]) -> None:
    got, _ = w.merge(argv, env)
    assert got == want


def test_two_pods_on_one_node_exactly_one_hosts() -> None:
    # Same node, same IP: only names decide.
    a = {**VOLCANO, "HOSTNET_RDMA_IDENTITIES": "j-worker-0,j-worker-0.j"}
    b = {**VOLCANO, "HOSTNET_RDMA_IDENTITIES": "j-worker-1,j-worker-1.j"}
    assert [w.merge(["t.py"], e)[1].is_host for e in (a, b)] == ["true", "false"]


@pytest.mark.parametrize(
    ("endpoint", "host"),
    [("a.b:1", "a.b"), ("A.B.:1", "a.b"), ("[::1]:29400", "::1"), ("host", "host"), ("fe80::1", "fe80::1")],
)
def test_endpoint_host(endpoint: str, host: str) -> None:
    assert w.endpoint_host(endpoint) == host


def test_expand_missing_var_is_none() -> None:
    assert w.expand("${NOPE}:1", {}) is None
    assert w.expand_sum("${A}+${B}", {"A": "1", "B": "x"}) is None
    assert w.expand_sum("${A}+${B}", {"A": "1", "B": "2"}) == "3"


def test_missing_default_nnodes_is_reported() -> None:
    env = {k: v for k, v in VOLCANO.items() if k != "VC_WORKER_NUM"}
    args, plan = w.merge(["t.py"], env)  # at admission: known only at run time, said
    assert not any(a.startswith("--nnodes") for a in args)
    assert any("VC_WORKER_NUM" in n for n in plan.notes) and not plan.fatal
    # In the pod the count is still missing: refuse rather than train alone.
    _, plan = w.merge(["t.py"], env, w.here({}, wait=False))
    assert plan.nnodes == "?" and "${VC_MASTER_NUM}+${VC_WORKER_NUM} needs env" in plan.fatal
    _, plan = w.merge(["--nnodes=2", "t.py"], env, w.here({}, wait=False))
    assert not plan.fatal


def test_missing_default_endpoint_is_reported() -> None:
    env = {**VOLCANO, "HOSTNET_RDMA_RDZV_ENDPOINT": "${LWS_LEADER_ADDRESS}:1"}
    args, plan = w.merge(["t.py"], env)
    assert "--rdzv-endpoint" not in " ".join(args)
    assert any("LWS_LEADER_ADDRESS" in n for n in plan.notes)


# ---------------------------------------------------------------- preflight messages


def test_torch_24_is_refused_with_the_reason() -> None:
    with pytest.raises(
        w.PreflightError, match=r"torch 2\.4\.1\+cu121 is older than 2\.5: torch 2\.4\.x ignores --local-addr"
    ):
        w.check_torch_version("2.4.1+cu121", "2.5")
    w.check_torch_version("2.5.0", "2.5")
    w.check_torch_version("2.14.0a0+git1234", "2.5")


def test_unresolvable_name_says_which_and_why() -> None:
    with pytest.raises(w.PreflightError) as e:
        w.wait_resolvable("no-such-pod.invalid", 0.2, "this pod's DNS name (--local-addr)")
    msg = str(e.value)
    assert "'no-such-pod.invalid' did not resolve within 0s" in msg
    assert "dnsPolicy: ClusterFirstWithHostNet" in msg and "publish-not-ready-addresses" in msg


def test_missing_etcd_module_is_reported(tmp_path: Path) -> None:
    plan = w.Plan()
    plan.backend = "etcd-v2"
    # An interpreter without python-etcd: isolated mode with an empty path.
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    fake.chmod(0o755)
    with pytest.raises(
        w.PreflightError, match=r"needs the `etcd` module \(python-etcd\).*pip install python-etcd==0.4.5"
    ):
        w.preflight(plan, {"HOSTNET_RDMA_MIN_TORCH": "0"}, str(fake))


def test_old_torch_in_the_torchrun_interpreter_fails_preflight(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "torch-2.4.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n")
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    fake.chmod(0o755)
    with pytest.raises(w.PreflightError, match=r"torch 2\.4\.1 is older than 2\.5"):
        w.preflight(w.Plan(), {}, str(fake))


# ---------------------------------------------------------------- interfaces (GLOO_SOCKET_IFNAME)


def test_interface_found_for_an_address_on_this_machine() -> None:
    addrs = w.interface_addresses()
    assert "lo" in addrs and "127.0.0.1" in addrs["lo"]
    ifname, detail = w.interface_for("127.0.0.1", {"eth9": ["10.0.0.5"], "lo": ["127.0.0.1"]})
    assert ifname is None and "loopback" in detail  # loopback cannot carry cross-node traffic
    ifname, detail = w.interface_for("127.0.0.1", {"eth9": ["127.0.0.1"]})
    assert ifname is None  # still loopback by address


def test_interface_for_routable_address() -> None:
    ifname, ip = w.interface_for("192.0.2.7", {"lo": ["127.0.0.1"], "ens3": ["192.0.2.7", "fe80::1"]})
    assert (ifname, ip) == ("ens3", "192.0.2.7")


def test_interface_not_found_says_so() -> None:
    ifname, detail = w.interface_for("192.0.2.8", {"ens3": ["192.0.2.7"]})
    assert ifname is None and detail == "no interface carries 192.0.2.8 (the address of 192.0.2.8)"


def test_user_gloo_ifname_is_kept() -> None:
    plan = w.Plan()
    plan.local_addr = "127.0.0.1"
    env, notes = w.socket_ifnames(plan, {"GLOO_SOCKET_IFNAME": "ib0"})
    assert env == {} and notes == []


def test_gloo_unset_when_no_interface_with_one_line_reason() -> None:
    plan = w.Plan()
    plan.local_addr = "no-such-host.invalid"
    env, notes = w.socket_ifnames(plan, {})
    assert (
        env == {}
        and len(notes) == 1
        and notes[0].startswith("GLOO_SOCKET_IFNAME left unset: no-such-host.invalid does not resolve")
    )


def test_nccl_ifname_knob_off_by_default() -> None:
    plan = w.Plan()
    plan.local_addr = "x"
    assert w.socket_ifnames(plan, {"HOSTNET_RDMA_GLOO_SOCKET_IFNAME": "0"}) == ({}, [])


# ---------------------------------------------------------------- dry run, end to end


def run_wrapper(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "app.wrapper", "torchrun", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_dry_run_prints_json_argv_and_summary_on_stderr() -> None:
    env = {**WORKER0, "HOSTNET_RDMA_DRY_RUN": "1", "HOSTNET_RDMA_LOCAL_ADDR": "localhost"}
    p = run_wrapper(["--nproc-per-node=2", "train.py"], env)
    assert p.returncode == 0, p.stderr
    argv = json.loads(p.stdout)
    assert argv[0] == "torchrun" and "--local-addr=localhost" in argv and "--rdzv-conf=is_host=true" in argv
    assert "launcher=volcano backend=c10d is_host=true local_addr=localhost" in p.stderr
    # localhost resolves to loopback: the reason is given and GLOO_SOCKET_IFNAME is left unset.
    assert "GLOO_SOCKET_IFNAME left unset" in p.stderr and "loopback" in p.stderr


def test_dry_run_does_not_wait_for_dns() -> None:
    env = {**VOLCANO, "HOSTNET_RDMA_DRY_RUN": "1", "HOSTNET_RDMA_DNS_TIMEOUT": "600"}
    p = run_wrapper(["train.py"], env)
    assert p.returncode == 0 and json.loads(p.stdout)[-1] == "train.py"


def test_preflight_failure_exits_nonzero_before_exec(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    real = fake_bin / "torchrun"
    real.write_text(f"#!{sys.executable}\nprint('SHOULD NOT RUN')\n")
    real.chmod(0o755)
    env = {
        **VOLCANO,
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "HOSTNET_RDMA_DNS_TIMEOUT": "0",
        "HOSTNET_RDMA_MIN_TORCH": "0",
        "HOSTNET_RDMA_LOCAL_ADDR": "nope.invalid",
        "HOSTNET_RDMA_PEERS": "j-*",
    }
    p = run_wrapper(["train.py"], env)
    assert p.returncode == 1
    assert "SHOULD NOT RUN" not in p.stdout
    assert "error: this pod's DNS name (--local-addr) 'nope.invalid' did not resolve" in p.stderr


def test_execs_the_real_torchrun_with_merged_argv(tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    real = fake_bin / "torchrun"
    real.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nprint(json.dumps([sys.argv[1:], os.environ.get('GLOO_SOCKET_IFNAME')]))\n"
    )
    real.chmod(0o755)
    host = socket.gethostname()
    env = {
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "HOSTNET_RDMA_MIN_TORCH": "0",
        "HOSTNET_RDMA_RDZV_BACKEND": "c10d",
        "HOSTNET_RDMA_RDZV_ENDPOINT": "localhost:1",
        "HOSTNET_RDMA_LOCAL_ADDR": "localhost",
        "HOSTNET_RDMA_IDENTITIES": f"localhost,{host}",
    }
    p = run_wrapper(["t.py"], env)
    assert p.returncode == 0, p.stderr
    argv, _gloo = json.loads(p.stdout)
    assert argv == [
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:1",
        "--local-addr=localhost",
        "t.py",
    ]


def test_wrapper_is_python_3_8_grammar_before_and_after_minifying() -> None:
    import ast

    from app.wrapper import FILES, minify, payload

    for path in FILES.values():
        ast.parse(path.read_text(), feature_version=(3, 8))
        ast.parse(minify(path.read_text()), feature_version=(3, 8))
        assert ast.dump(ast.parse(minify(path.read_text()))) != ""
    # It travels in every pod spec with delivery inline (the default delivery carries none of
    # it), compressed. A ratchet: its growth, change by change, is in docs/benchmarks-history.md
    # ("The inline wrapper payload").
    assert len(payload()) < 39_700


def test_minified_wrapper_behaves_like_the_source(tmp_path: Path) -> None:
    from app.wrapper import minified_source

    script = tmp_path / "w.py"
    script.write_text(minified_source())
    env = {**VOLCANO, "HOSTNET_RDMA_DRY_RUN": "1", "PATH": os.environ["PATH"]}
    p = subprocess.run(
        [sys.executable, str(script), "--nproc-per-node=2", "t.py"], env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == ["torchrun", *w.merge(["--nproc-per-node=2", "t.py"], VOLCANO)[0]]


def test_missing_real_torchrun_exits_127_with_the_reason(tmp_path: Path) -> None:
    env = {**VOLCANO, "PATH": str(tmp_path), "HOSTNET_RDMA_MIN_TORCH": "0"}
    full = {"PYTHONPATH": str(ROOT), **env}
    p = subprocess.run([sys.executable, "-m", "app.wrapper", "torchrun", "t.py"], env=full, capture_output=True,
                       text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert p.returncode == 127
    assert "the real torchrun is not on PATH after the wrapper; is torch installed in this image?" in p.stderr


def test_gloo_interface_is_looked_up_after_the_dns_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh pod's DNS record often appears a few seconds after the container starts. The
    interface for GLOO_SOCKET_IFNAME must be found after the preflight has waited for it; found
    before, the name did not resolve, gloo bound 127.0.1.1 and the peers' connects were refused
    (seen on the cluster tier: PyTorchJob, Connection refused, remote=[127.0.1.1])."""
    calls = {"n": 0}

    def late_dns(name: str) -> list[str]:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise OSError(-2, "Name or service not known")
        return ["192.0.2.10"]

    monkeypatch.setattr(w, "resolve", late_dns)
    monkeypatch.setattr(w, "interface_addresses", lambda: {"eth7": ["192.0.2.10"]})
    monkeypatch.setattr(w, "run_in", lambda interpreter, code: (1, ""))  # no torch here: skip its checks
    monkeypatch.setattr(w.time, "sleep", lambda s: None)
    plan = w.Plan()
    plan.backend, plan.local_addr, plan.endpoint = "c10d", "late.example", ""
    env = {"HOSTNET_RDMA_DNS_TIMEOUT": "30", "HOSTNET_RDMA_FABRIC_PREFLIGHT": "off"}
    extra_env, notes = w.checked(plan, env, None)
    assert extra_env == {"GLOO_SOCKET_IFNAME": "eth7"}, notes
    assert not any("left unset" in n for n in notes)


def test_the_pods_identity_in_its_dns_zone_comes_from_its_resolv_conf(tmp_path: Path) -> None:
    """What the kubelet writes for ClusterFirstWithHostNet: the namespace's zone first (the last
    search/domain line wins, as in glibc). Without one, the address alone."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "resolv.conf").write_text(
        "domain corp.example\nsearch old.example\n"
        "search team-a.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
        "nameserver 10.96.0.10\noptions ndots:5\n"
    )
    assert w.search_domains(str(tmp_path)) == [
        "team-a.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
        "corp.example",
    ]
    env = w.settings({"HOSTNET_RDMA_POD": "local_addr=j-worker-1.j", "HOSTNET_RDMA_SYSFS_ROOT": str(tmp_path)})
    assert env["HOSTNET_RDMA_IDENTITIES"] == "j-worker-1.j.team-a.svc.cluster.local"
    (etc / "resolv.conf").write_text("search corp.example\nnameserver 10.0.0.2\n")  # the node's own DNS
    env = w.settings({"HOSTNET_RDMA_POD": "local_addr=j-worker-1.j", "HOSTNET_RDMA_SYSFS_ROOT": str(tmp_path)})
    assert env["HOSTNET_RDMA_IDENTITIES"] == "j-worker-1.j"
    assert w.search_domains(str(tmp_path / "nowhere")) == []


def test_a_refusal_is_the_containers_termination_message(tmp_path: Path) -> None:
    """`kubectl describe pod` shows the container's termination message: the wrapper writes
    its one-line cause into the file the kubelet mounted (here a path the webhook passed on)."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "torchrun").write_text(f"#!{sys.executable}\nprint('SHOULD NOT RUN')\n")
    (fake_bin / "torchrun").chmod(0o755)
    message = tmp_path / "termination-log"
    message.write_text("")  # the kubelet creates it; the wrapper never does
    env = {**VOLCANO, "PATH": f"{fake_bin}:{os.environ['PATH']}", "HOSTNET_RDMA_MIN_TORCH": "0",
           "HOSTNET_RDMA_RDZV_ENDPOINT": "localhost:29400",
           "HOSTNET_RDMA_POD": f"termination_log={message}"}  # fmt: skip
    p = run_wrapper(["train.py"], env)
    assert p.returncode == 1 and "SHOULD NOT RUN" not in p.stdout
    cause = "rendezvous endpoint localhost is loopback, but the job runs on several nodes"
    assert f"hostnet-rdma: error: {cause}" in p.stderr
    assert message.read_text().startswith(f"hostnet-rdma: {cause}")
    assert "\n" not in message.read_text().strip()
    # No file, no message (outside a pod): nothing is created.
    missing = tmp_path / "absent"
    p = run_wrapper(["train.py"], {**env, "HOSTNET_RDMA_POD": f"termination_log={missing}"})
    assert p.returncode == 1 and not missing.exists()


def test_the_webhook_passes_a_non_default_termination_message_path() -> None:
    from app.core import InjectConfig, Params, mutate
    from app.core.wrap import settings_of

    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "ns", "labels": {"batch.kubernetes.io/job-completion-index": "0"}},
        "spec": {"hostname": "p-0", "subdomain": "p", "hostNetwork": True, "containers": [
            {"name": "a", "image": "i", "command": ["torchrun", "t.py"], "terminationMessagePath": "/tmp/why"},
            {"name": "b", "image": "i", "command": ["torchrun", "t.py"], "terminationMessagePath": "/dev/termination-log"},
        ]},
    }  # fmt: skip
    params = Params(InjectConfig(), "ns", "payload", "test")
    a, b = mutate(pod, params).pod["spec"]["containers"]
    assert "termination_log=/tmp/why" in (settings_of(a) or "")
    assert "termination_log" not in (settings_of(b) or "")


def test_the_node_carries_an_address_it_can_bind() -> None:
    from app.wrapper import torchrun as w

    assert w.can_bind("127.0.0.1")
    assert not w.can_bind("192.0.2.123")  # TEST-NET-1: on no interface here
    node = w.here({}, wait=False)
    assert node.carries("127.0.0.1")[0] is True and node.carries("192.0.2.123")[0] is False
    assert node.carries(node.hostname)[0] is True


def test_a_store_port_taken_on_the_node_is_refused_in_seconds_naming_the_job() -> None:
    """Two jobs' stores on one node's host network: the second store host refuses at start,
    naming the job that holds the port, instead of torch's bind error; a port some other
    process listens on is refused as such."""
    import socket

    from app.wrapper import rules
    from app.wrapper import torchrun as w

    def plan(job: str, port: int) -> rules.Plan:
        p = rules.Plan()
        p.backend, p.endpoint, p.rdzv_id, p.local_addr, p.is_host = (
            "c10d",
            f"{job}-0.{job}:{port}",
            f"{job}-uid",
            f"{job}-0.{job}",
            "true",
        )
        return p

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    held = len(w._HELD)
    try:
        w.claim_store_port(plan("a", port))
        assert len(w._HELD) == held + 2 and all(x.get_inheritable() for x in w._HELD[held:])  # torchrun keeps them
        with pytest.raises(
            w.PreflightError,
            match=rf"port {port} of this node is already the rendezvous store of job b?a-uid \(pod a-0.a\)",
        ):
            w.claim_store_port(plan("b", port))
    finally:
        for x in w._HELD[held:]:
            x.close()
        del w._HELD[held:]
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        other = listener.getsockname()[1]
        with pytest.raises(w.PreflightError, match=rf"port {other} of this node is taken .* not a rendezvous store"):
            w.claim_store_port(plan("c", other))
    assert len(w._HELD) == held
