"""What a tenant's pod may cost the webhook, and what the webhook may do to a valid pod (issue:
no tenant can take the webhook down). Each finding of the security review, with its repro
input: the review stays within the stated budget (docs/security.md, "Review cost") and the pod
is never made invalid."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import orjson
import pytest

from app.core import Params, mutate, names
from app.core import budget as cost
from app.webhook import review
from app.wrapper import payload, rules
from tests import costutil

PARAMS = Params(wrapper_payload=payload())


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "j-0", "namespace": "ns", "labels": {"hostnet-rdma.io/inject": "enabled"},
                     "annotations": annotations or {}},
        "spec": {"hostNetwork": True, "hostname": "j-0", "subdomain": "j",
                 "containers": list(containers) or [trainer()], **spec},
    }  # fmt: skip


def trainer(**extra: Any) -> dict[str, Any]:
    return {"name": "trainer", "image": "pytorch", "command": ["torchrun", "--nnodes=2", "t.py"], **extra}


def body_of(p: dict[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {"uid": "u1", "namespace": "ns", "operation": "CREATE",
                                     "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": p}})  # fmt: skip


def measured(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    """fn's CPU seconds and how far it raised the process's resident memory at its peak, run in
    a forked child (a clean high-water mark; what an OOM kill counts). tracemalloc would count
    the address space orjson reserves for its output (127 MiB for 6 MiB written) as used."""
    return costutil.cost_in_child(fn)


class Answer(NamedTuple):
    """What a review answered, as plain data (the compiled core's classes do not pickle)."""

    outcome: str
    body: bytes
    warnings: list[str]


def answered(body: bytes) -> Answer:
    out = review.answer(body, PARAMS)
    return Answer(out.outcome, out.body, [w.text for w in out.warnings])


def within_budget(p: dict[str, Any]) -> Answer:
    body = body_of(p)
    cpu, peak, out = measured(lambda: answered(body))
    assert cpu < cost.REVIEW_CPU_SECONDS + cost.REVIEW_CPU_PER_MIB * len(body) / (1 << 20), f"{cpu:.2f} s of CPU"
    assert peak < cost.REVIEW_MEMORY_BYTES + cost.REVIEW_MEMORY_PER_BODY_BYTE * len(body), f"{peak >> 20} MiB at peak"
    assert isinstance(out, Answer)
    return out


# ---------------------------------------------------------------- exponential env


def doubling_env(n: int) -> list[dict[str, str]]:
    return [{"name": "E0", "value": "x"}] + [{"name": f"E{i}", "value": f"$(E{i - 1})$(E{i - 1})"} for i in range(1, n)]


def test_env_that_doubles_at_each_entry_costs_a_bounded_review() -> None:
    # 29 entries took 1 GiB in the server; 31 a MemoryError.
    p = pod(trainer(env=[*doubling_env(40), {"name": "PET_RDZV_ENDPOINT", "value": "j-0.j:29400"}]))
    out = within_budget(p)
    assert out.outcome == "mutated"


def test_env_expansion_stops_at_the_bound_and_reads_as_unknown() -> None:
    from app.core.wrap import _literal_env

    _, _, env = measured(lambda: _literal_env(trainer(env=[*doubling_env(40), {"name": "LATE", "value": "ok"}])))
    assert env["E0"] == "x" and env["E3"] == "x" * 8 and env["LATE"] == "ok"
    assert "E39" not in env  # 2**39 bytes: not expanded, unknown as a value read at run time
    literal = len("x") + len("ok")
    assert sum(len(v) for v in env.values()) <= cost.ENV_EXPANDED_BYTES + literal


# ---------------------------------------------------------------- names used in patterns


def jobset_pod(name: str) -> dict[str, Any]:
    p = pod(trainer(command=["torchrun", "--nnodes=2", "--rdzv-endpoint=other-0.j:1", "t.py"]))
    p["metadata"]["annotations"] = {"jobset.sigs.k8s.io/jobset-name": name,
                                    "jobset.sigs.k8s.io/replicatedjob-name": "w"}  # fmt: skip
    return p


def test_a_huge_job_name_with_commas_is_no_pattern() -> None:
    # A 245 KB annotation cost 10.7 s of CPU and 639 MiB, and stayed in a 256-entry cache.
    name = ",".join(f"a{i}*b*c*d*e*f*[!x]" for i in range(14_000))[:245_000]
    out = within_budget(jobset_pod(name))
    assert out.outcome == "mutated", out.warnings  # no longer a JobSet pod: a name that is no name


def test_peers_are_names_not_globs() -> None:
    # `[` and `?` in a job name are characters, not a character class or a wildcard.
    ids = rules.expand_identities("a-0.a.ns.svc.cluster.local")
    assert rules.names_a_pod("job-1.a", ids, ["job-*"])
    assert rules.names_a_pod("job-1.a.ns.svc.cluster.local", ids, ["job-*"])
    assert not rules.names_a_pod("jobx-1.a", ids, ["job-*"])
    assert not rules.names_a_pod("jxb-1.a", ids, ["j?b-*"])
    assert rules.names_a_pod("j?b-1.a", ids, ["j?b-*"])
    assert not rules.names_a_pod("jab-1.a", ids, ["j[a]b-*"])


def test_a_job_name_that_is_no_dns_name_gives_no_peers_and_no_endpoint() -> None:
    from app.core import launchers

    info = launchers.describe(jobset_pod("x" * 300), 29400)
    assert info.peers == () and info.rdzv_endpoint == ""
    info = launchers.describe(jobset_pod("Bad,Name"), 29400)
    assert info.peers == () and info.rdzv_endpoint == ""
    info = launchers.describe(jobset_pod("good-name"), 29400)
    assert info.peers == ("good-name-*",) and info.rdzv_endpoint.startswith("good-name-w-0-0.")


# ---------------------------------------------------------------- backtracking and argv cost


def test_repeated_rdzv_conf_is_linear() -> None:
    # 0.32 s per 64 KiB argv, 2.6 s for a pod of 8 such containers.
    text = "--rdzv-conf=" * (60 * 1024 // 12)  # within the 64 KiB that admission reads
    containers = [trainer(name=f"c{i}", command=["torchrun", "--nnodes=2", text, "t.py"]) for i in range(8)]
    within_budget(pod(*containers))


def test_canonical_resolves_a_prefix_in_constant_time() -> None:
    assert rules.canonical("--nn") == "--nnodes" and rules.canonical("--rdzv_e") == "--rdzv-endpoint"
    with pytest.raises(rules.ArgvError, match="ambiguous"):
        rules.canonical("--rdzv")
    cpu, _, _ = measured(lambda: [rules.canonical("--nproc") for _ in range(650_000)])
    assert cpu < 0.5  # 2.6 s before


def test_an_argv_of_many_abbreviated_options_is_not_analysed_at_admission() -> None:
    # 650 k abbreviated options: 2.6 s in canonical() before.
    within_budget(pod(trainer(command=["torchrun", *(["--nn=2"] * 650_000), "t.py"])))
    # One that fits the patch bound is wrapped, and the warning says what admission left out.
    out = within_budget(pod(trainer(command=["torchrun", *(["--nn=2"] * 12_000), "t.py"])))
    assert out.outcome == "mutated"
    assert any("checked by the wrapper at run time only" in w for w in out.warnings), out.warnings


# ---------------------------------------------------------------- valid pods stay valid


def annotation_bytes(p: dict[str, Any]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in p["metadata"].get("annotations", {}).items())


def test_the_status_annotation_is_bounded() -> None:
    # A very long endpoint gave a 270 KB status annotation (over 256 KiB for all annotations).
    endpoint = "x" * 200_000 + ".j:29400"
    argv = ["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-conf=is_host=1", "t.py"]
    c = trainer(command=argv, env=[{"name": "PET_RDZV_ENDPOINT", "value": endpoint}])
    result = mutate(pod(c), PARAMS)
    status = result.pod["metadata"]["annotations"][names.STATUS_ANNOTATION]
    assert len(status) <= cost.STATUS_BYTES
    assert orjson.loads(status)["problems"], status  # still says there is a problem


def test_annotations_near_the_limit_leave_the_pod_unchanged() -> None:
    big = {"user.example/blob": "y" * (cost.ANNOTATIONS_BYTES - 60)}  # ours is ~100 bytes
    out = review.answer(body_of(pod(annotations=big)), PARAMS)
    assert out.outcome == "unsupported", out.warnings
    assert "annotations" in out.warnings[0].text and "262144" in out.warnings[0].text
    assert b'"patch"' not in out.body


def test_windows_pods_are_left_alone() -> None:
    result = mutate(pod(os={"name": "windows"}), PARAMS)
    assert not result.changed and "Windows" in result.reason
    out = review.answer(body_of(pod(os={"name": "windows"})), PARAMS)
    assert b'"patch"' not in out.body and any("Windows" in w.text for w in out.warnings)
    # A Windows pod that opted out asked for nothing: no warning about what it did not get.
    opted_out = pod(os={"name": "windows"})
    opted_out["metadata"]["labels"]["hostnet-rdma.io/inject"] = "disabled"
    result = mutate(opted_out, PARAMS)
    assert not result.changed and not result.warnings and "opts out" in result.reason


@pytest.mark.parametrize("path", ["/hostnet-rdma", "/hostnet-rdma/", "/"])
def test_a_users_mount_at_the_wrapper_path_leaves_the_pod_unchanged(path: str) -> None:
    c = trainer(volumeMounts=[{"name": "data", "mountPath": path}])
    out = review.answer(body_of(pod(c, volumes=[{"name": "data", "emptyDir": {}}])), PARAMS)
    if path == "/":
        assert out.outcome == "mutated"  # a mount at / does not hide /hostnet-rdma's own mount
        return
    assert out.outcome == "unsupported" and "/hostnet-rdma" in out.warnings[0].text, out.warnings


def test_a_sidecar_added_by_another_webhook_after_us_is_no_puzzle() -> None:
    # A Job's single container runs a script (chosen because it is the only one); another
    # webhook then adds a sidecar, and reinvocation sends the pod back.
    p = pod(trainer(command=["python", "train.py"]))
    first = mutate(p, PARAMS)
    assert first.changed
    again = first.pod
    again["spec"]["containers"].append({"name": "istio-proxy", "image": "proxy"})
    second = mutate(again, PARAMS)
    assert not any("cannot tell" in w.text for w in second.warnings), second.warnings
    assert not second.changed, "a second pass changes nothing"


@pytest.mark.parametrize("annotation", [names.ANN_NNODES, names.ANN_RDZV_PORT])
def test_a_number_of_thousands_of_digits_is_no_number(annotation: str) -> None:
    # int() of 5,000 digits raised ValueError (an internal error, found by tests/test_adversarial.py).
    out = review.answer(body_of(pod(annotations={annotation: "9" * 5000})), PARAMS)
    assert out.outcome == "mutated", out.warnings
    assert any("is not" in w.text and annotation in w.text for w in out.warnings), out.warnings
    assert rules.max_nodes("9" * 5000) == 0 and rules.expand_sum("1+" + "9" * 5000, {}) is None


# ---------------------------------------------------------------- the wrapper's own env


def test_a_non_numeric_dns_timeout_is_a_line_not_a_traceback() -> None:
    assert rules.seconds("abc", 300.0) == 300.0
    assert rules.seconds("12.5", 300.0) == 12.5
    assert rules.seconds("-1", 300.0) == 300.0
    assert rules.seconds("inf", 300.0) == 300.0 and rules.seconds("nan", 300.0) == 300.0
    assert rules.dns_timeout({rules.ENV_DNS_TIMEOUT: "5m"}) == 300.0


# ---------------------------------------------------------------- the script admission reads (issue #45)


def jobset(script: str) -> dict[str, Any]:
    p = pod(trainer(command=["bash", "-c", script]))
    p["metadata"]["labels"].update({"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/jobset-uid": "u",
                                    "jobset.sigs.k8s.io/replicatedjob-name": "w"})  # fmt: skip
    return p


def test_a_multi_line_torchrun_script_is_read_as_bash_passes_it() -> None:
    """Tutorials write `torchrun \\` and one flag a line. The continuation was a word of its own:
    a false "wrapper will refuse: --nnodes not given" on a job that runs."""
    result = mutate(jobset("torchrun \\\n  --nnodes=2 \\\n  --nproc-per-node=8 \\\n  train.py"), PARAMS)
    assert not any("--nnodes not given" in w.text for w in result.warnings), result.warnings
    status = orjson.loads(result.pod["metadata"]["annotations"][names.STATUS_ANNOTATION])
    assert "problems" not in status


def test_a_flag_made_by_the_shell_is_quoted_whole_in_the_warning() -> None:
    # `$(...)` with a quoted IFS was cut at its space: "the command sets --local-addr=$(IFS=', itself".
    script = 'torchrun --nnodes=2 --local-addr=$(IFS=", " read a b <<< "$(hostname -i)"; echo $a) t.py'
    result = mutate(jobset(script), PARAMS)
    (said,) = [w.text for w in result.warnings if "sets --local-addr" in w.text]
    assert '--local-addr=$(IFS=", " read a b <<< "$(hostname -i)"; echo $a) itself' in said, said
    assert "--local-addr=$(IFS=', itself" not in said


def volcano_pod(task: str, index: int, tasks: tuple[str, ...]) -> dict[str, Any]:
    env = [e for t in tasks for e in (
        {"name": f"VC_{t.upper().replace('-', '_')}_HOSTS", "valueFrom": {"configMapKeyRef": {"name": "j-svc", "key": "h"}}},
        {"name": f"VC_{t.upper().replace('-', '_')}_NUM", "valueFrom": {"configMapKeyRef": {"name": "j-svc", "key": "n"}}},
    )]  # fmt: skip
    p = pod(trainer(command=["torchrun", "t.py"], env=env))
    p["metadata"]["name"] = f"j-{task}-{index}"
    p["metadata"]["labels"].update({"volcano.sh/job-name": "j", "volcano.sh/task-spec": task})
    p["spec"]["hostname"], p["spec"]["subdomain"] = f"j-{task}-{index}", "j"
    return p


@pytest.mark.parametrize(
    ("tasks", "store"),
    [(("launcher", "trainer"), "launcher"), (("trainer", "ps-server"), "ps-server"), (("worker",), "worker"),
     (("master", "worker"), "master"), (("worker", "tensorboard"), "worker"), (("master", "worker", "chief"), "master")],
)  # fmt: skip
def test_every_volcano_task_layout_has_one_store(tasks: tuple[str, ...], store: str) -> None:
    """Tasks `launcher` + `trainer` (no `master`): each task's pods were sent to index 0 of their
    own task while --nnodes counted both tasks: two stores, each waiting for every node. A task
    beside master/worker (tensorboard) is neither counted nor the store's (the cluster tier's
    vc-tb job hung on a store on its tensorboard pod while this rule was wrong)."""
    from app.core import launchers

    infos = [launchers.describe(volcano_pod(t, i, tasks), 29400) for t in tasks for i in range(2)]
    assert {i.rdzv_endpoint for i in infos} == {f"j-{store}-0.j:29400"}
    counted = sorted((t for t in tasks if t in ("master", "worker")), key=str.upper) or sorted(tasks, key=str.upper)
    assert {i.nnodes for i in infos} == {"+".join(f"${{VC_{t.upper().replace('-', '_')}_NUM}}" for t in counted)}


def test_efa_devices_from_their_device_plugin_get_no_host_path_and_no_privilege() -> None:
    """AWS's FSDP and Megatron examples request vpc.amazonaws.com/efa: they got privileged,
    SYS_ADMIN and the /dev/infiniband hostPath (every EFA device of the node, not the ones the
    plugin assigned). What is left out, and why, is in the status annotation."""
    c = trainer(resources={"limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}})
    result = mutate(pod(c), PARAMS)
    spec = result.pod["spec"]
    assert not any("hostPath" in v for v in spec.get("volumes", []))
    sc = spec["containers"][0]["securityContext"]
    assert "privileged" not in sc and "SYS_ADMIN" not in sc["capabilities"]["add"]
    status = orjson.loads(result.pod["metadata"]["annotations"][names.STATUS_ANNOTATION])
    said = "NICs from the AWS EFA device plugin (vpc.amazonaws.com/efa)"
    assert status["skipped"] == {"infiniband": said, "privileged": said}
