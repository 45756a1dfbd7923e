"""Whatever the webhook adds must be accepted by the cluster's own rules, or the pod is left as
it is with a warning (issue: hardening): a refused patch fails pod creation whatever
failurePolicy says. The quota and LimitRange cases run against the real API server in the
apiserver tier; here the core's decisions, table by table."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import config
from app.core import Params, UnsupportedPod, mutate
from app.core.mutate import training_containers
from app.webhook import review

INIT = config.from_dict({"wrapper": {"delivery": "initContainer", "image": "registry.example/hostnet-rdma:1"}})


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ij-0", "namespace": "ns", "labels": {"hostnet-rdma.io/inject": "enabled"}},
        "spec": {"hostNetwork": True, "hostname": "ij-0", "subdomain": "ij", "containers": list(containers), **spec},
    }  # fmt: skip


def trainer(**extra: Any) -> dict[str, Any]:
    return {"name": "trainer", "image": "pytorch", "command": ["torchrun", "--nnodes=2", "t.py"], **extra}


def init_container(p: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in p["spec"]["initContainers"] if c["name"] == "hostnet-rdma-wrapper"]
    return c


# ---------------------------------------------------------------- the init container's resources


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # Guaranteed: mirrored, so it stays Guaranteed and a quota on limits.* accepts it.
        ({"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
         {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}),
        # What a LimitRange defaulted on the trainer (before our webhook ran) is mirrored too.
        ({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "8"}},
         {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}),
        # GPUs only (BestEffort for cpu and memory): nothing to mirror, and no GPU on the init container.
        ({"limits": {"nvidia.com/gpu": "8", "rdma/hca": "1"}}, None),
        (None, None),
    ],
)  # fmt: skip
def test_the_init_container_mirrors_the_trainers_cpu_and_memory(
    resources: dict[str, Any] | None, expected: dict[str, Any] | None
) -> None:
    c = trainer(**({"resources": resources} if resources else {}))
    got = init_container(mutate(pod(c), Params(config=INIT, namespace="ns")).pod)
    assert got.get("resources") == expected


def test_init_resources_from_the_config_win() -> None:
    cfg = config.from_dict({"wrapper": {"delivery": "initContainer", "image": "r/w:1",
                                        "initResources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "50m", "memory": "64Mi"}}}})  # fmt: skip
    c = trainer(resources={"limits": {"cpu": "4", "memory": "8Gi"}})
    got = init_container(mutate(pod(c), Params(config=cfg, namespace="ns")).pod)
    assert got["resources"] == {"requests": {"cpu": "50m"}, "limits": {"cpu": "50m", "memory": "64Mi"}}


def test_init_resources_are_validated() -> None:
    with pytest.raises(config.ConfigError, match="initResources"):
        config.from_dict({"wrapper": {"initResources": {"limits": {"cpu": "lots"}}}})
    with pytest.raises(config.ConfigError, match="initResources"):
        config.from_dict({"wrapper": {"initResources": {"limits": {"nvidia.com/gpu": "1"}}}})


# ---------------------------------------------------------------- names the webhook adds


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["spec"]["containers"].append({"name": "hostnet-rdma-wrapper", "image": "x"}),
         "container name 'hostnet-rdma-wrapper' is hostnet-rdma's"),
        (lambda p: p["spec"].setdefault("initContainers", []).append(
            {"name": "hostnet-rdma-wrapper", "image": "x", "command": ["sh", "-c", "setup"]}),
         "init container name 'hostnet-rdma-wrapper' is hostnet-rdma's and this one is not"),
        (lambda p: p["spec"].setdefault("volumes", []).append(
            {"name": "hostnet-rdma", "persistentVolumeClaim": {"claimName": "data"}}),
         "volume name 'hostnet-rdma' is hostnet-rdma's, and the pod has a persistentVolumeClaim"),
        (lambda p: p["spec"].setdefault("volumes", []).append({"name": "hostnet-rdma", "emptyDir": {}}),
         "volume name 'hostnet-rdma' is hostnet-rdma's, and the pod has a emptyDir"),
        (lambda p: p["spec"].setdefault("volumes", []).append({"name": "hostnet-rdma-shm", "emptyDir": {}}),
         "volume name 'hostnet-rdma-shm' is hostnet-rdma's"),
        (lambda p: p["spec"].setdefault("volumes", []).append({"name": "hostnet-rdma-ib", "configMap": {"name": "x"}}),
         "volume name 'hostnet-rdma-ib' is hostnet-rdma's"),
    ],
)  # fmt: skip
def test_a_name_the_webhook_adds_taken_by_the_user_leaves_the_pod_unchanged(change: Any, message: str) -> None:
    p = pod(trainer())
    change(p)
    with pytest.raises(UnsupportedPod, match=message):
        mutate(p, Params(config=INIT, namespace="ns", wrapper_payload="x"))
    # Through the review: allowed, unchanged, the warning says why (and the Event says it too).
    body = review_body(p)
    result = review.answer(body, Params(config=INIT, namespace="ns", wrapper_payload="x"))
    assert result.outcome == "unsupported" and message in result.warnings[0].text
    assert b'"patch"' not in result.body


def review_body(p: dict[str, Any]) -> bytes:
    import json

    request = {"uid": "u", "operation": "CREATE", "namespace": "ns", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "object": p}  # fmt: skip
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


@pytest.mark.parametrize("delivery", ["initContainer", "inline", "imageVolume"])
def test_our_own_names_from_an_earlier_pass_are_ours(delivery: str) -> None:
    cfg = config.from_dict({"wrapper": {"delivery": delivery, "image": "r/w:1"}})
    params = Params(config=cfg, namespace="ns", wrapper_payload="x")
    once = mutate(pod(trainer()), params).pod
    assert mutate(copy.deepcopy(once), params).pod == once


# ---------------------------------------------------------------- which container trains, and what it gets


def test_a_sidecar_is_never_chosen_by_its_position() -> None:
    sidecar = {"name": "envoy", "image": "envoy"}
    entrypoint = {"name": "trainer", "image": "pytorch"}  # its image's entrypoint runs torchrun
    p = pod(sidecar, entrypoint)
    with pytest.raises(UnsupportedPod, match="cannot tell which of the containers envoy, trainer runs training"):
        mutate(p, Params(namespace="ns", wrapper_payload="x"))
    p["metadata"]["annotations"] = {"hostnet-rdma.io/containers": "trainer"}
    result = mutate(p, Params(namespace="ns", wrapper_payload="x"))
    assert result.training == ["trainer"] and "securityContext" not in result.pod["spec"]["containers"][0]
    assert training_containers(pod({"name": "only", "image": "i"}), INIT) == ["only"]


def test_sys_admin_only_for_devices_by_host_path() -> None:
    plugin = trainer(resources={"limits": {"rdma/hca_shared_devices_a": "1", "nvidia.com/gpu": "8"}})
    sc = mutate(pod(plugin), Params(namespace="ns", wrapper_payload="x")).pod["spec"]["containers"][0][
        "securityContext"
    ]
    assert sc == {"capabilities": {"add": ["IPC_LOCK"]}}  # no SYS_ADMIN, no privileged
    host_path = mutate(pod(trainer()), Params(namespace="ns", wrapper_payload="x")).pod["spec"]["containers"][0]
    assert host_path["securityContext"]["capabilities"]["add"] == ["IPC_LOCK", "SYS_ADMIN"]


# ---------------------------------------------------------------- review cost


def script_pod(size: int) -> dict[str, Any]:
    line = "echo 'setup step with $VAR and \"quotes\" (x)' && "
    script = (line * (size // len(line) + 1))[:size] + " torchrun --nnodes=2 t.py"
    return pod({"name": "trainer", "image": "pytorch", "command": ["bash", "-c", script]})


def test_a_large_script_is_not_analysed_and_the_review_stays_cheap() -> None:
    """A tenant's 1 MiB `bash -c` script: not split into words at admission (bounded by
    MAX_ANALYSED_SCRIPT), handled as a command whose torchrun arguments are known at run time
    only, with a warning; reviewed in about the time of a normal review, not ~0.5 s."""
    import json
    import time

    from app.core import wrap
    from app.wrapper import payload

    params = Params(namespace="ns", wrapper_payload=payload(), version="t")

    def body(p: dict[str, Any]) -> bytes:
        request = {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": p}
        return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()

    def cost(b: bytes) -> float:
        review.answer(b, params)
        t0 = time.perf_counter()
        for _ in range(5):
            review.answer(b, params)
        return (time.perf_counter() - t0) / 5

    normal, big = body(script_pod(200)), body(script_pod(1 << 20))
    warnings = mutate(script_pod(1 << 20), params).warnings
    assert any(f"over the {wrap.MAX_ANALYSED_SCRIPT} analysed at admission" in w.text for w in warnings), warnings
    # Its patch would carry the script again (the wrapped command): over maxPatchBytes, so the
    # pod goes through unchanged, as the rules say for any pod that large.
    result = review.answer(big, params)
    assert result.outcome == "unsupported" and "maxPatchBytes" in result.warnings[0].text, result.warnings
    small_cost, big_cost = cost(normal), cost(big)
    print(f"\nreview: normal {small_cost * 1e3:.2f} ms, 1 MiB script {big_cost * 1e3:.2f} ms")
    assert big_cost < max(20 * small_cost, 0.02), (small_cost, big_cost)
    # Under the bound, analysed as before: its endpoint is checked at admission.
    assert not any("analysed at admission" in w.text for w in mutate(script_pod(60_000), params).warnings)


OLD_TORCHRUN = __import__("re").compile(r"(^|[\s/;&|(`\"'])torchrun($|[\s;&|)`\"'])")


@pytest.mark.parametrize(
    "command",
    [["torchrun", "t.py"], ["/usr/bin/torchrun"], ["bash", "-c", "cd x && torchrun t.py"], ["sh", "-c", "(torchrun)"],
     ["mytorchrun", "t.py"], ["torchrunner"], ["bash", "-c", "echo torchrun_x"], ["python", "-m", "torch.distributed.run"],
     ["python", "-m", "torch.distributed.launcher"], ["bash", "-c", "'torchrun' a; x\ttorchrun\n"], ["torch"], []],
)  # fmt: skip
def test_torchrun_detection_by_substring_agrees_with_the_word_pattern(command: list[str]) -> None:
    from app.core import wrap

    argv = " ".join(command)
    want = bool(OLD_TORCHRUN.search(argv) or wrap._MODULE_RUN.search(argv))
    assert wrap.runs_torch_distributed({"name": "c", "command": command}) == want


@pytest.mark.parametrize("path", ["/", "/etc", "/dev", "/dev/../etc", "/var/run/docker.sock", "dev/infiniband"])
def test_infiniband_path_must_be_a_device_directory(path: str) -> None:
    """Whoever edits the config must not mount the node's root (or any host path) into every
    privileged training container through the infiniband step."""
    with pytest.raises(config.ConfigError, match="infinibandPath"):
        config.from_dict({"inject": {"infinibandPath": path}})
    assert config.from_dict({"inject": {"infinibandPath": "/dev/infiniband"}}).infiniband_path == "/dev/infiniband"


@pytest.mark.parametrize(
    ("instance_type", "hca", "gid"),
    [("BM.GPU.H100.8", "=mlx5_0,mlx5_1,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9,mlx5_10,mlx5_12,mlx5_13,mlx5_14,mlx5_15,mlx5_16,mlx5_17", "3"),
     ("BM.GPU.H200.8", "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11", "3"),
     ("BM.GPU.GB200.4", "mlx5_0,mlx5_1,mlx5_3,mlx5_4", None),
     ("Standard_ND96isr_H100_v5", "mlx5_ib", None)],
)  # fmt: skip
def test_the_shape_profile_is_chosen_by_the_instance_type(instance_type: str, hca: str, gid: str | None) -> None:
    """Today's GPU shapes are built in (OCI's recommended parameters by shape, Azure NDv5)."""
    p = pod(trainer(), nodeSelector={"node.kubernetes.io/instance-type": instance_type})
    result = mutate(p, Params(namespace="ns", wrapper_payload="x"))
    env = {e["name"]: e["value"] for e in result.pod["spec"]["containers"][0]["env"] if "value" in e}
    assert result.profile == instance_type and result.profile_reason.startswith("nodeSelector")
    assert env["NCCL_IB_HCA"] == hca and env.get("NCCL_IB_GID_INDEX") == gid
