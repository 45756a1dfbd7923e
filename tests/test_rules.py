"""The shared rendezvous rule (app/wrapper/rules.py): torchrun's own argv parsing, the
endpoint checks, and agreement between the admission-time PET_* fallback and the wrapper.

The parser is checked against torch's real parser (torch.distributed.run.get_args_parser) on
generated command lines, so "parses as torchrun does" is measured, not assumed.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import InjectConfig, Params, mutate
from app.core.wrap import settings_of
from app.wrapper import rules

VOLCANO_W1 = {
    rules.ENV_LAUNCHER: "volcano",
    rules.ENV_LOCAL_ADDR: "j-worker-1.j",
    rules.ENV_IDENTITIES: "j-worker-1,j-worker-1.j,j-worker-1.j.ns,j-worker-1.j.ns.svc,j-worker-1.j.ns.svc.cluster.local",
    rules.ENV_PEERS: "j-*",
    rules.ENV_RDZV_ID: "j-uid",
    rules.ENV_RDZV_BACKEND: "c10d",
    rules.ENV_RDZV_ENDPOINT: "j-worker-0.j:23456",
    rules.ENV_NNODES: "2",
}


@pytest.mark.parametrize(
    ("argv", "want_nnodes"),
    [
        (["-t3", "--nnodes=5", "train.py"], "5"),  # attached short value: --nnodes is not swallowed
        (["-r3", "--nnodes", "5", "train.py"], "5"),
        (["-t", "3", "--nnodes=5", "train.py"], "5"),
        (["--nnode=5", "train.py"], "5"),  # argparse abbreviation, as torchrun accepts it
        (["--nproc_per_node=2", "train.py"], "2"),  # no --nnodes: the launcher default
    ],
)
def test_short_options_and_abbreviations_parse_as_torchrun_does(argv: list[str], want_nnodes: str) -> None:
    args, plan = rules.merge(argv, VOLCANO_W1)
    assert plan.nnodes == want_nnodes
    assert plan.local_addr == "j-worker-1.j" and "--local-addr=j-worker-1.j" in args
    assert args[-1] == "train.py"


def test_unparseable_argv_is_left_alone_and_said() -> None:
    from app.wrapper import torchrun as w

    args, plan = w.plan_for(["--no-such-option", "train.py"], VOLCANO_W1)
    notes = plan.notes
    assert args == ["--no-such-option", "train.py"]
    assert plan.backend == "unparsed" and "not understood" in notes[0]


def _here(hostname: str = "node-1", addresses: tuple[str, ...] = ("127.0.0.1", "192.0.2.11", "fe80::1"),
          names: dict[str, list[str]] | None = None) -> rules.Here:  # fmt: skip
    """A node like the seed's: its own name resolves locally (to 127.0.1.1), others' do not."""
    table = {"node-1": ["127.0.1.1"], **(names or {})}
    return rules.Here(hostname, addresses, lambda name: table.get(name, []))


def test_ip_endpoint_is_not_decided_at_admission_and_warned() -> None:
    args, plan = rules.merge(["--rdzv-endpoint=10.1.2.3:29400", "t.py"], VOLCANO_W1)
    assert plan.is_host is None and not any(a.startswith("--rdzv-conf") for a in args)
    assert "names no pod" in plan.endpoint_problem and "both would try to host" in plan.endpoint_problem
    assert not plan.fatal


@pytest.mark.parametrize(
    ("endpoint", "is_host", "how"),
    [
        ("192.0.2.11:29400", "true", "192.0.2.11 is an address of this node"),
        ("192.0.2.10:29400", "false", "192.0.2.10 is not an address of this node"),
        ("[fe80:0::1]:29400", "true", "is an address of this node"),  # another spelling of the same v6
        ("node-1:29400", "true", "node-1 is this node's host name"),
        ("store.example:29400", "true", "resolves to 192.0.2.11, an address of this node"),
        ("trainer-svc:29400", "false", "resolves to 192.0.2.10, not an address of this node"),
    ],
)
def test_an_endpoint_that_names_no_pod_is_decided_by_this_nodes_addresses(
    endpoint: str, is_host: str, how: str
) -> None:
    """torchrun itself compares such a host with gethostname() and what that resolves to
    (127.0.1.1 here): on the seed's nodes nobody would host. The wrapper asks the node."""
    node = _here(names={"store.example": ["192.0.2.11"], "trainer-svc": ["192.0.2.10"]})
    args, plan = rules.merge([f"--rdzv-endpoint={endpoint}", "t.py"], VOLCANO_W1, node)
    assert plan.is_host == is_host and f"--rdzv-conf=is_host={is_host}" in args
    assert how in plan.endpoint_problem and "both would try to host" in plan.endpoint_problem
    assert not plan.fatal


def test_an_endpoint_that_resolves_nowhere_and_names_no_pod_refuses() -> None:
    _, plan = rules.merge(["--rdzv-endpoint=node-0:29400", "t.py"], VOLCANO_W1, _here())
    assert plan.is_host is None
    assert "node-0 does not resolve on this node and names no pod of this job" in plan.fatal
    assert "--rdzv-endpoint" in plan.fatal


def test_a_pod_name_is_never_decided_by_address() -> None:
    """Two pods of one job on one node share its address: the other pod's name stays false."""
    node = _here(names={"j-worker-0.j": ["192.0.2.11"]})
    _, plan = rules.merge(["--rdzv-endpoint=j-worker-0.j:1", "t.py"], VOLCANO_W1, node)
    assert plan.is_host == "false" and not plan.endpoint_problem and not plan.fatal


@pytest.mark.parametrize(
    ("argv", "nnodes", "fatal"),
    [
        (["t.py"], "2", True),  # the launcher's count: two nodes
        (["--nnodes=1", "t.py"], "1", False),  # said by the user: a one-node run on localhost
        (["--nnodes=1:3", "t.py"], "1:3", True),
        (["--standalone", "t.py"], "", False),
    ],
)
def test_a_loopback_endpoint_refuses_when_the_job_has_several_nodes(argv: list[str], nnodes: str, fatal: bool) -> None:
    _, plan = rules.merge(["--rdzv-endpoint=localhost:29400", *argv], VOLCANO_W1, _here())
    assert plan.nnodes == nnodes
    assert ("is loopback, but the job runs on several nodes" in plan.fatal) == fatal, plan.fatal


def test_no_node_count_for_a_job_of_several_pods_refuses() -> None:
    env = {**VOLCANO_W1, rules.ENV_LAUNCHER: "jobset", rules.ENV_NNODES: rules.NNODES_UNKNOWN}
    _, plan = rules.merge(["t.py"], env, _here())
    assert plan.nnodes == "?" and "--nnodes" not in " ".join(plan.added)
    assert plan.fatal.startswith("--nnodes not given: this pod is one of its job's several (jobset)")
    assert plan.fatal.endswith('hostnet-rdma.io/nnodes: "N"')
    for argv in (["--nnodes=2", "t.py"], ["--nnodes=1", "t.py"]):
        _, plan = rules.merge(argv, env, _here())
        assert not plan.fatal and plan.nnodes == argv[0].split("=")[1]
    _, plan = rules.merge(["t.py"], {**env, "PET_NNODES": "2"}, _here())
    assert not plan.fatal and plan.nnodes == "2"
    # A static rendezvous (MASTER_ADDR + node rank) is the user's, but without --nnodes torchrun
    # counts 1 node: each pod would train alone (JobSet's own resnet example), so it refuses too.
    static = ["--master-addr=a", "--node-rank=1", "t.py"]
    _, plan = rules.merge(static, {**env, rules.ENV_RDZV_BACKEND: ""})
    assert plan.backend == "static" and plan.fatal.startswith("--nnodes not given")
    _, plan = rules.merge(["--nnodes=4", *static], {**env, rules.ENV_RDZV_BACKEND: ""})
    assert plan.backend == "static" and not plan.fatal


def test_max_nodes() -> None:
    assert [rules.max_nodes(v) for v in ("2", "1:4", " 3 ", "x", "", "2:y", "?")] == [2, 4, 3, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("j.ns.svc:29400", True),  # the headless Service, not a pod
        ("store.example.com:29400", True),
        ("j-worker-0.j:29400", False),
        ("j-master-0.j.ns.svc.cluster.local:1", False),
        ("j-worker-1.j:1", False),  # itself
    ],
)
def test_endpoint_that_names_no_pod_is_reported(endpoint: str, problem: bool) -> None:
    _, plan = rules.merge([f"--rdzv-endpoint={endpoint}", "t.py"], VOLCANO_W1)
    assert bool(plan.endpoint_problem) == problem, plan.endpoint_problem
    assert ("names no pod" in " ".join(plan.notes)) == problem


# ---------------------------------------------------------------- against torch's own parser

_VALUES = st.sampled_from(["2", "1:4", "c10d", "etcd-v2", "h-0.h:29400", "none", "x", "is_host=1", "3"])
_OPTIONS = st.sampled_from(
    ["--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_endpoint", "--rdzv-id",
     "--rdzv-conf", "--local-addr", "--local_addr", "--max-restarts", "--role", "--nnod", "--rdzv-end", "-t", "-r"]
)  # fmt: skip
_FLAGS = st.sampled_from(["-m", "--module", "--no-python", "--run-path", "--run_path"])


@st.composite
def torchrun_argv(draw: Any) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            argv.append(draw(_FLAGS))
            continue
        option, value = draw(_OPTIONS), draw(_VALUES)
        if option == "--max-restarts":
            value = "3"  # an int option: a type error is not a parsing question
        if option in ("-t", "-r"):
            value = draw(st.sampled_from(["0", "3", "1:2"]))
            argv += [f"{option}{value}"] if kind == 1 else [option, value]
        elif kind == 1:
            argv.append(f"{option}={value}")
        else:
            argv += [option, value]
    return [*argv, "train.py", *draw(st.lists(st.sampled_from(["--nnodes=9", "-t", "x", "--"]), max_size=3))]


DESTS = {"--nnodes": "nnodes", "--rdzv-backend": "rdzv_backend", "--rdzv-endpoint": "rdzv_endpoint",
         "--rdzv-id": "rdzv_id", "--rdzv-conf": "rdzv_conf", "--local-addr": "local_addr", "--tee": "tee",
         "--redirects": "redirects", "--module": "module", "--nproc-per-node": "nproc_per_node"}  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=torchrun_argv())
def test_argv_parsing_matches_torchrun(argv: list[str]) -> None:
    torch_run = pytest.importorskip("torch.distributed.run")
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PET_")}
    try:
        parsed = torch_run.get_args_parser().parse_args(argv)
    except SystemExit:
        with pytest.raises(rules.ArgvError):
            rules.Argv(argv)
        return
    finally:
        os.environ.update(saved)
    ours = rules.Argv(argv)
    for option, dest in DESTS.items():
        theirs = getattr(parsed, dest)
        if option == "--module":
            assert ours.has(option) == bool(theirs), (argv, option)
        elif ours.has(option):
            assert ours.get(option) == str(theirs), (argv, option)
    assert parsed.training_script == "train.py"
    assert ours.script is not None and ours.args[ours.script] == "train.py"


# ---------------------------------------------------------------- admission vs run time


def _pod(env: list[dict[str, str]], command: list[str] | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "trainer", "image": "pytorch", "env": env}
    if command is not None:
        c["command"] = command
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{JOB}-1", "namespace": "ns",
                     # The pod label: a training pod whatever it runs (the entrypoint case has no command).
                     "labels": {"batch.kubernetes.io/job-name": JOB, "batch.kubernetes.io/controller-uid": "u-1",
                                "hostnet-rdma.io/inject": "enabled"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": "u-1"}]},
        "spec": {"hostname": f"{JOB}-1", "subdomain": JOB, "hostNetwork": True, "containers": [c]},
    }  # fmt: skip


def _run_env(container: dict[str, Any], zone: str = "ns.svc.cluster.local") -> dict[str, str]:
    """The env the wrapper works from in this container: its env, the settings the bootstrap
    exports from its first argument, and what follows from them in the pod's DNS zone."""
    env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    settings_ = settings_of(container)
    assert settings_ is not None
    return rules.unpack({**env, rules.ENV_POD: settings_}, zone)


JOB = "ij"
PARAMS = Params(InjectConfig(), "ns", "payload", "test")
_PET = st.fixed_dictionaries(
    {},
    optional={
        "PET_RDZV_BACKEND": st.sampled_from(["c10d", "etcd-v2", "static"]),
        "PET_RDZV_ENDPOINT": st.sampled_from([f"{JOB}-0.{JOB}:29400", f"{JOB}-1.{JOB}:1", "10.0.0.1:29400", "svc:1"]),
        "PET_NNODES": st.sampled_from(["2", "1:4"]),
        "PET_RDZV_ID": st.sampled_from(["none", "mine"]),
        "PET_RDZV_CONF": st.sampled_from(["read_timeout=60", "is_host=false"]),
        "PET_LOCAL_ADDR": st.sampled_from(["me.example"]),
    },
)


@settings(max_examples=300, deadline=None)
@given(pet=_PET)
def test_admission_fallback_reaches_the_wrappers_decision(pet: dict[str, str]) -> None:
    """The same pod, once with a command (wrapped: the wrapper decides at run time) and once
    without (its torchrun is uncatchable: the admission-time PET_* env must make torchrun
    itself decide the same). Both paths run rules.merge; they must agree on every setting."""
    env = [{"name": k, "value": v} for k, v in pet.items()]
    wrapped = mutate(_pod(env, ["torchrun", "t.py"]), PARAMS).pod["spec"]["containers"][0]
    fallback = mutate(_pod(env, None), PARAMS).pod["spec"]["containers"][0]
    _, by_wrapper = rules.merge(["t.py"], _run_env(wrapped))
    pet_env = {e["name"]: e["value"] for e in fallback["env"] if e["name"].startswith("PET_")}
    # What torchrun sees in the uncaught container: its own PET_* env and no wrapper.
    _, by_torchrun = rules.merge(["t.py"], pet_env)
    fields = ["backend", "endpoint", "local_addr", "rdzv_id", "is_host", "nnodes"]
    if by_wrapper.fatal:
        # The wrapper would refuse (no node count for a job of several pods); the uncaught
        # torchrun cannot be stopped: the pod's status annotation and a warning say so.
        status = mutate(_pod(env, None), PARAMS).pod["metadata"]["annotations"]["hostnet-rdma.io/injected"]
        assert "cannot refuse: " + by_wrapper.fatal.split(":")[0] in status, status
        if "--nnodes not given" in by_wrapper.fatal:
            fields.remove("nnodes")
    if by_wrapper.endpoint_problem and by_wrapper.is_host is None:
        fields.remove("is_host")  # decided in the pod by its node's addresses: nothing to set
    for field in fields:
        assert getattr(by_torchrun, field) == getattr(by_wrapper, field), (field, pet)


def test_wrapper_defaults_match_the_cluster_config_defaults() -> None:
    """The webhook omits env equal to the wrapper's defaults, so the two must not drift."""
    from app.core.params import InjectConfig

    cfg = InjectConfig()
    want = {
        rules.ENV_GLOO_IFNAME: "1" if cfg.gloo_socket_ifname else "0",
        rules.ENV_NCCL_IFNAME: "1" if cfg.nccl_socket_ifname else "0",
        rules.ENV_DNS_TIMEOUT: str(cfg.dns_timeout_seconds),
        rules.ENV_MIN_TORCH: cfg.min_torch,
        rules.ENV_FABRIC_PREFLIGHT: cfg.fabric_preflight,
    }
    assert want == rules.DEFAULTS


_LABEL = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)


@settings(max_examples=500)
@given(host=_LABEL, sub=st.one_of(st.just(""), _LABEL), ns=st.one_of(st.just(""), _LABEL),
       domain=st.sampled_from(["cluster.local", "k8s", "gpu.corp.example"]), per_pod=st.booleans())  # fmt: skip
def test_identities_travel_in_their_longest_form_and_expand_back(
    host: str, sub: str, ns: str, domain: str, per_pod: bool
) -> None:
    """The webhook sends only the longest names; the wrapper's expansion gives back every name
    the launcher implies, host name first, plus only shorter forms of those names."""
    from app.core.launchers.base import LauncherInfo

    info = LauncherInfo("job", hostname=host, subdomain=sub, service_per_pod=per_pod)
    names = list(info.identities(ns, domain))
    sent = ",".join(info.longest_identities(ns, domain))
    got = rules.expand_identities(sent)
    assert set(names) <= set(got) and got[0] == host
    assert all(any(n == g or n.startswith(g + ".") for n in names) for g in got)
    assert len(got) == len(set(got))  # no name twice: one name's forms cannot repeat, several's can
    assert len(sent) <= len(",".join(names))


def test_several_names_expand_without_repeats() -> None:
    got = rules.expand_identities("h.sub.ns.svc.cluster.local, h.ns.svc.cluster.local,H.SUB.ns.svc.cluster.local.")
    assert got == ["h", "h.sub", "h.sub.ns", "h.sub.ns.svc", "h.sub.ns.svc.cluster", "h.sub.ns.svc.cluster.local",
                   "h.ns", "h.ns.svc", "h.ns.svc.cluster", "h.ns.svc.cluster.local"]  # fmt: skip
    assert rules.expand_identities("a..b") == ["a", "a.", "a..b"]  # one name, however odd: nothing to drop


def test_is_host_from_the_longest_name_alone() -> None:
    env = {**VOLCANO_W1, rules.ENV_IDENTITIES: "j-worker-0.j.ns.svc.cluster.local"}
    for endpoint in ("j-worker-0", "j-worker-0.j", "j-worker-0.j.ns.svc", "j-worker-0.j.ns.svc.cluster.local"):
        _, plan = rules.merge(["--nnodes=2", f"--rdzv-endpoint={endpoint}:29400", "t.py"], env)
        assert plan.is_host == "true", endpoint
    _, plan = rules.merge(["--nnodes=2", "--rdzv-endpoint=j-worker-1.j:29400", "t.py"], env)
    assert plan.is_host == "false" and not plan.endpoint_problem


# ------------------------------------------------------------------ HOSTNET_RDMA_POD


_SETTING_VALUE = st.text(st.characters(blacklist_characters=";", blacklist_categories=("Cs",)), max_size=20)


@given(settings_=st.dictionaries(st.sampled_from(rules.PACKED), _SETTING_VALUE))
def test_packed_settings_unpack_to_the_same_variables(settings_: dict[str, str]) -> None:
    env = rules.unpack({rules.ENV_POD: rules.pack(settings_), "OTHER": "x"}, "ns.svc.cluster.local")
    # Every setting sent comes back as it was; the only others are what follows from them.
    assert {k: v for k, v in env.items() if k in rules.PACKED} == {
        **rules.implied(settings_, "ns.svc.cluster.local"),
        **settings_,
    }
    assert env["OTHER"] == "x"


def test_implied_settings() -> None:
    """What the wrapper derives when the webhook leaves a setting out, and only then."""
    zone = "team-a.svc.cluster.local"
    env = rules.unpack({rules.ENV_POD: "local_addr=j-worker-1.j;rdzv_endpoint=j-worker-0.j:23456"}, zone)
    assert env[rules.ENV_RDZV_BACKEND] == "c10d"
    assert env[rules.ENV_PEERS] == "j-*"
    assert env[rules.ENV_IDENTITIES] == "j-worker-1.j.team-a.svc.cluster.local"
    # Sent, even empty, a setting is not derived; a bare host name implies no peers.
    env = rules.unpack({rules.ENV_POD: "local_addr=p-0;peers=;identities=p-0.x.svc.k8s;rdzv_backend=etcd"}, zone)
    assert env[rules.ENV_PEERS] == "" and env[rules.ENV_IDENTITIES] == "p-0.x.svc.k8s"
    assert env[rules.ENV_RDZV_BACKEND] == "etcd"
    assert rules.implied({rules.ENV_LOCAL_ADDR: "p-0"}) == {rules.ENV_IDENTITIES: "p-0"}  # no peers
    # No zone (a resolver without the cluster's search list): the address alone, so an endpoint
    # naming a pod as the launchers do still finds its host.
    env = rules.unpack({rules.ENV_POD: "local_addr=j-1.j"})
    assert env[rules.ENV_IDENTITIES] == "j-1.j"
    _, plan = rules.merge(["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=j-1.j:29400", "t.py"], env)
    assert plan.is_host == "true"


def test_cluster_zone_is_the_first_namespace_zone_in_the_search_list() -> None:
    assert rules.cluster_zone(["team-a.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp"]) == (
        "team-a.svc.cluster.local"
    )
    assert rules.cluster_zone(["corp.example", "Team-B.svc.gpu.example."]) == "team-b.svc.gpu.example"
    assert rules.cluster_zone(["svc.cluster.local", "cluster.local", "example.com"]) == ""
    assert rules.cluster_zone([]) == ""


@settings(max_examples=300, deadline=None)
@given(pet=_PET, dns=st.sampled_from(["ClusterFirstWithHostNet", "Default", None]))
def test_the_wrapper_works_from_what_admission_decided(pet: dict[str, str], dns: str | None) -> None:
    """Settings left out of the pod because the wrapper derives them come back, at run time,
    as admission had them: the run-time decision is the admission-time one."""
    env = [{"name": k, "value": v} for k, v in pet.items()]
    pod = _pod(env, ["torchrun", "t.py"])
    if dns:
        pod["spec"]["dnsPolicy"] = dns
    else:
        pod["metadata"]["annotations"] = {"hostnet-rdma.io/skip": "dns"}
    c = mutate(pod, PARAMS).pod["spec"]["containers"][0]
    # Only ClusterFirstWithHostNet gives the pod's resolver the namespace's zone.
    zone = "ns.svc.cluster.local" if dns == "ClusterFirstWithHostNet" else "corp.example"
    at_run_time = _run_env(c, rules.cluster_zone([zone]))
    assert at_run_time[rules.ENV_IDENTITIES] == f"{JOB}-1.{JOB}.ns.svc.cluster.local"
    assert at_run_time[rules.ENV_PEERS] == f"{JOB}-*"
    _, by_wrapper = rules.merge(["t.py"], at_run_time)
    full = {**{e["name"]: e["value"] for e in env}, rules.ENV_LOCAL_ADDR: f"{JOB}-1.{JOB}", rules.ENV_RDZV_ID: "u-1",
            rules.ENV_IDENTITIES: f"{JOB}-1.{JOB}.ns.svc.cluster.local", rules.ENV_PEERS: f"{JOB}-*",
            rules.ENV_LAUNCHER: "job"}  # fmt: skip
    if "PET_NNODES" not in pet:
        full[rules.ENV_NNODES] = rules.NNODES_UNKNOWN  # an Indexed Job implies no count
    _, at_admission = rules.merge(["t.py"], full)
    fields = ("backend", "endpoint", "local_addr", "rdzv_id", "is_host", "nnodes", "endpoint_problem", "added", "fatal")
    assert [getattr(by_wrapper, f) for f in fields] == [getattr(at_admission, f) for f in fields]


def test_the_packed_value_wins_and_unknown_keys_are_ignored() -> None:
    env = rules.unpack({
        rules.ENV_POD: "local_addr=a-0.a;dry_run=1;bogus=2;nnodes=${N}+1;rdzv_conf=k=v",
        rules.ENV_LOCAL_ADDR: "set-by-hand", rules.ENV_PEERS: "a-*",
    })  # fmt: skip
    assert env[rules.ENV_LOCAL_ADDR] == "a-0.a"  # the webhook's value, as set_owned always gave
    assert env[rules.ENV_PEERS] == "a-*"  # set on its own: still read
    assert env[rules.ENV_NNODES] == "${N}+1"
    # Only the settings the webhook sends: no dry run or anything else through the packed value.
    assert rules.ENV_DRY_RUN not in env and "HOSTNET_RDMA_BOGUS" not in env and "HOSTNET_RDMA_RDZV_CONF" not in env


def test_admission_packs_the_settings_and_keeps_a_declared_name_in_step() -> None:
    declared = [{"name": rules.ENV_LOCAL_ADDR, "value": "stale"}, {"name": rules.ENV_RDZV_ID, "value": "mine"}]
    c = mutate(_pod(declared, ["torchrun", "t.py"]), PARAMS).pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env[rules.ENV_LOCAL_ADDR] == f"{JOB}-1.{JOB}"  # declared: overwritten with ours, as before
    assert env[rules.ENV_RDZV_ID] == "u-1"
    settings_ = settings_of(c)
    # All else declared, or derived in the pod; an Indexed Job implies no node count.
    assert settings_ == "launcher=job;nnodes=?", settings_
    unpacked = _run_env(c)
    assert unpacked[rules.ENV_LOCAL_ADDR] == f"{JOB}-1.{JOB}" and unpacked[rules.ENV_LAUNCHER] == "job"
    assert (
        unpacked[rules.ENV_PEERS] == f"{JOB}-*"
        and unpacked[rules.ENV_IDENTITIES] == f"{JOB}-1.{JOB}.ns.svc.cluster.local"
    )
    # Only the declared ones: no other HOSTNET_RDMA_* entry (the settings are an argument).
    ours = sorted(k for k in env if k.startswith(rules.ENV_PREFIX))
    assert ours == sorted([rules.ENV_LOCAL_ADDR, rules.ENV_RDZV_ID]), ours


@given(settings_=st.dictionaries(st.sampled_from(rules.PACKED), _SETTING_VALUE))
def test_packed_settings_are_recognised_as_such(settings_: dict[str, str]) -> None:
    assert rules.is_packed(rules.pack(settings_))


def test_a_pod_wrapped_by_a_version_without_settings_is_wrapped_again_whole() -> None:
    """Re-submitted from `kubectl get` after an upgrade, a command wrapped without settings
    (the bootstrap, then the user's command) keeps every word of the user's command."""
    from app import config
    from app.core.wrap import BOOTSTRAP, BOOTSTRAP_PATH

    image = Params(
        config.from_dict({"wrapper": {"image": "r.example/hostnet-rdma:1", "delivery": "imageVolume"}}), "ns"
    )
    first = mutate(_pod([], ["torchrun", "t.py"]), image).pod["spec"]["containers"][0]["command"]
    assert first[0] == BOOTSTRAP_PATH and first[2:] == ["torchrun", "t.py"], first
    legacy = _pod([], [BOOTSTRAP_PATH, "torchrun", "t.py"])
    assert mutate(legacy, image).pod["spec"]["containers"][0]["command"] == first
    inline = mutate(_pod([], ["torchrun", "t.py"]), PARAMS).pod["spec"]["containers"][0]["command"]
    legacy = _pod([], ["/bin/sh", "-c", BOOTSTRAP, "hostnet-rdma-bootstrap", "payload", "torchrun", "t.py"])
    assert mutate(legacy, PARAMS).pod["spec"]["containers"][0]["command"] == inline


# ---------------------------------------------------------------- flags left from hand-written shell

NODE1 = {"node-1": ["127.0.1.1"], "j-worker-1.j": ["192.0.2.11"], "node-0": [], "j-worker-0.j": ["192.0.2.10"]}


@pytest.mark.parametrize(
    ("local_addr", "why"),
    [
        ("node-1", "is this node's host name"),  # --local-addr=$(hostname), $HOSTNAME
        ("127.0.1.1", "is loopback"),  # --local-addr=$(hostname -i) where the name maps to 127.0.1.1
        ("localhost", "is loopback"),
        ("192.0.2.10", "is not an address of this node"),  # node 0's IP, written into every pod
        ("node-0", "does not resolve on this node"),
    ],
)
def test_a_local_addr_other_nodes_cannot_reach_is_replaced_by_the_pods_dns_name(local_addr: str, why: str) -> None:
    args, plan = rules.merge([f"--local-addr={local_addr}", "--nnodes=2", "t.py"], VOLCANO_W1, _here(names=NODE1))
    assert plan.local_addr == "j-worker-1.j" and "--local-addr=j-worker-1.j" in args and not plan.fatal
    assert any(n.startswith(f"--local-addr {local_addr} replaced by j-worker-1.j: it {why}") for n in plan.notes), (
        plan.notes
    )
    # Pinned by the annotation: refused in seconds with the same cause instead.
    _, plan = rules.merge([f"--local-addr={local_addr}", "--nnodes=2", "t.py"],
                          {**VOLCANO_W1, rules.ENV_KEEP_LOCAL_ADDR: "1"}, _here(names=NODE1))  # fmt: skip
    assert (
        plan.fatal.startswith(f"--local-addr {local_addr} {why}")
        and "the other nodes could not reach this one" in plan.fatal
    )


@pytest.mark.parametrize("local_addr", ["j-worker-1.j", "j-worker-1.j.ns.svc.cluster.local", "192.0.2.11"])
def test_a_local_addr_that_works_is_kept(local_addr: str) -> None:
    args, plan = rules.merge([f"--local-addr={local_addr}", "--nnodes=2", "t.py"], VOLCANO_W1, _here(names=NODE1))
    assert plan.local_addr == local_addr and f"--local-addr={local_addr}" in args
    assert not plan.fatal and not any("replaced" in n for n in plan.notes)


def test_a_one_node_job_keeps_a_loopback_local_addr() -> None:
    _, plan = rules.merge(["--local-addr=localhost", "--nnodes=1", "t.py"], VOLCANO_W1, _here(names=NODE1))
    assert plan.local_addr == "localhost" and not plan.fatal


def test_is_host_true_everywhere_is_refused_where_the_endpoint_names_another_pod() -> None:
    conf = "--rdzv-conf=is_host=true"
    _, plan = rules.merge([conf, "--nnodes=2", "t.py"], VOLCANO_W1, _here(names=NODE1))  # worker-1; endpoint worker-0
    assert plan.fatal.startswith("is_host=true, but the rendezvous endpoint j-worker-0.j names another pod of this job")
    worker0 = {
        **VOLCANO_W1,
        rules.ENV_LOCAL_ADDR: "j-worker-0.j",
        rules.ENV_IDENTITIES: "j-worker-0.j.ns.svc.cluster.local",
    }
    _, plan = rules.merge([conf, "--nnodes=2", "t.py"], worker0, _here(names=NODE1))
    assert not plan.fatal and plan.is_host == "true"
    # An IP endpoint: the node that carries it may host, another node may not.
    _, plan = rules.merge([conf, "--rdzv-endpoint=192.0.2.10:1", "--nnodes=2", "t.py"], VOLCANO_W1, _here(names=NODE1))
    assert plan.fatal.startswith("is_host=true, but the rendezvous endpoint 192.0.2.10 is not this node")


def test_is_host_false_on_the_pod_the_endpoint_names_is_refused() -> None:
    worker0 = {
        **VOLCANO_W1,
        rules.ENV_LOCAL_ADDR: "j-worker-0.j",
        rules.ENV_IDENTITIES: "j-worker-0.j.ns.svc.cluster.local",
    }
    _, plan = rules.merge(["--rdzv-conf=is_host=false", "--nnodes=2", "t.py"], worker0, _here(names=NODE1))
    assert plan.fatal.startswith("is_host=false, but the rendezvous endpoint j-worker-0.j is this pod's own DNS name")
    _, plan = rules.merge(["--rdzv-conf=is_host=false", "--nnodes=2", "t.py"], VOLCANO_W1, _here(names=NODE1))
    assert not plan.fatal  # worker-1: false is right


@pytest.mark.parametrize(("rank", "refused"), [("1", True), ("0", False)])
def test_static_master_addr_of_the_nodes_own_name(rank: str, refused: bool) -> None:
    env = {rules.ENV_LAUNCHER: "trainjob", rules.ENV_LOCAL_ADDR: "tj-node-0-1.tj"}
    argv = ["--master-addr=node-1", "--master-port=29500", "--nnodes=2", f"--node-rank={rank}", "t.py"]
    _, plan = rules.merge(argv, env, _here(names=NODE1))
    assert plan.backend == "static"
    if refused:
        assert plan.fatal.startswith(
            "--master-addr node-1 is this node itself (its host name or loopback), but this is node rank 1"
        )
    else:
        assert not plan.fatal and any("this node's own name" in n for n in plan.notes)
