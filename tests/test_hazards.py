"""What else breaks on the host network (issue 67, app/core/hazards.py): sshd on the node's port 22,
Multus attachments no CNI makes, DRA claims; and DRA-claimed GPUs and NICs plumbed as their
extended-resource twins are."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import preview
from app.core import InjectConfig, Params, budget, hazards, mutate, reasons, selection
from app.core.mutate import training_containers
from app.preview import controllers
from app.webhook import review

GOLDEN = Path(__file__).parent / "golden" / "mpijob"


@pytest.mark.parametrize(
    ("command", "ports", "source"),
    [
        (["/usr/sbin/sshd", "-De"], (22,), "default"),  # the MPI Operator's default worker command
        (["/usr/sbin/sshd", "-D", "-p", "2222"], (2222,), "-p"),
        (["sshd", "-Dp2222"], (2222,), "-p"),  # getopt: flags and a value in one word
        (["sshd", "-D", "-p", "2222", "-p", "22"], (2222, 22), "-p"),
        (["/usr/sbin/sshd", "-D", "-o", "Port=2222"], (2222,), "-o Port"),
        (["/usr/sbin/sshd", "-D", "-oPort 22"], (22,), "-o Port"),
        (["bash", "-c", "mkdir -p /var/run/sshd; /usr/sbin/sshd -D -p 2222"], (2222,), "-p"),
        (["bash", "-c", "exec /usr/sbin/sshd -D -e"], (22,), "default"),
        (["bash", "-c", "sed -i 's/#Port 22/Port 2222/' /etc/ssh/sshd_config\n/usr/sbin/sshd -D"], (2222,),
         "the script's sshd_config edit"),
        (["bash", "-c", 'echo "Port 2022" >> /etc/ssh/sshd_config && service ssh start; sshd -D'], (2022,),
         "the script's sshd_config edit"),
    ],
)  # fmt: skip
def test_the_sshd_a_command_starts_and_its_ports(command: list[str], ports: tuple[int, ...], source: str) -> None:
    found = hazards.sshd_of({"name": "w", "command": command})
    assert found is not None and (found.ports, found.source) == (ports, source), found


@pytest.mark.parametrize(
    "command",
    [["bash", "-c", "mkdir -p /var/run/sshd && sleep infinity"], ["echo", "sshd"], ["torchrun", "train.py"]],
)
def test_a_command_that_starts_no_sshd_has_none(command: list[str]) -> None:
    assert hazards.sshd_of({"name": "w", "command": command}) is None


def test_a_known_image_s_sshd_config_gives_its_port() -> None:
    """The MPI Operator's images configure sshd and ssh on 2222 (build/base/Dockerfile)."""
    worker = {"name": "w", "image": "mpioperator/mpi-pi:openmpi", "command": ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]}  # fmt: skip
    assert hazards.sshd_of(worker) == hazards.Sshd(
        "w", (2222,), "the image's sshd_config", "/home/mpiuser/.sshd_config"
    )
    assert hazards.told_ports({"image": "docker.io/mpioperator/openmpi:v0.6.0"}) == {2222}
    assert hazards.sshd_of({**worker, "image": "registry.example/mpi:1"}) == hazards.Sshd(
        "w", (22,), "default", "/home/mpiuser/.sshd_config"
    )


@pytest.mark.parametrize(
    ("container", "told"),
    [
        ({"command": ["bash", "-c", 'mpirun -mca plm_rsh_args "-p 2222" -np 2 ./a']}, {2222}),
        ({"command": ["mpirun", "--mca", "plm_rsh_args", "-p 2200 -o ConnectionAttempts=10", "./a"]}, {2200}),
        ({"command": ["bash", "-c", 'export PRTE_MCA_plm_ssh_args="-p 2222"; mpirun ./a']}, {2222}),
        ({"env": [{"name": "PRTE_MCA_plm_rsh_args", "value": "-p 2222"}]}, {2222}),
        ({"env": [{"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "value": "-o Port=2022"}]}, {2022}),
        ({"env": [{"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"}]}, set()),
        ({"command": ["mpirun", "-np", "2", "./a"]}, set()),
    ],
)  # fmt: skip
def test_the_ports_mpirun_s_ssh_is_told(container: dict[str, Any], told: set[int]) -> None:
    assert hazards.told_ports(container) == told


def test_an_env_the_mpi_operator_overrides_does_not_count() -> None:
    """The operator appends its own OMPI_MCA_plm_rsh_args after the user's: the last wins."""
    launcher = {"env": [{"name": "OMPI_MCA_plm_rsh_args", "value": "-p 2222"}]}
    assert hazards.told_ports(launcher) == {2222}
    assert hazards.told_ports(launcher, frozenset({"OMPI_MCA_plm_rsh_args"})) == set()


def test_multus_annotations_in_both_forms() -> None:
    assert hazards.networks({hazards.MULTUS_NETWORKS: "sriov-a, ns/sriov-b@net1"}) == ["sriov-a", "ns/sriov-b@net1"]
    json_form = '[{"name": "a", "namespace": "x", "interface": "net1"}, {"name": "b"}]'
    assert hazards.networks({hazards.MULTUS_NETWORKS: json_form}) == ["x/a", "b"]
    assert hazards.networks({hazards.MULTUS_NETWORKS: "[not json"}) == []
    assert hazards.networks({}) == []


def pod(**spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": 8}}}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-0", "namespace": "ml", **spec.pop("metadata", {})},
            "spec": {"hostNetwork": True, "containers": [container], **spec}}  # fmt: skip


def reasons_of(p: dict[str, Any], config: InjectConfig | None = None) -> dict[str, str]:
    result = mutate(p, Params(config=config or InjectConfig(), namespace="ml"))
    return {w.reason: w.text for w in result.warnings}


def test_sshd_on_22_is_warned_with_the_fix_and_left_as_written() -> None:
    p = pod(container={"command": ["/usr/sbin/sshd", "-De"]})
    result = mutate(p, Params(namespace="ml"))
    said = {w.reason: w for w in result.warnings}[reasons.SSHD_ON_NODE_PORT]
    assert "port 22" in said.text and 'plm_rsh_args "-p 2222"' in said.text and "PRTE_MCA_plm_ssh_args" in said.text
    assert "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS" in said.text and "HYDRA_LAUNCH_EXTRA_ARGS" in said.text
    assert result.pod["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]  # never rewritten
    assert reasons.SSHD_ON_NODE_PORT not in reasons_of(
        pod(container={"command": ["/usr/sbin/sshd", "-De", "-p", "2222"]})
    )


def test_a_sidecar_s_sshd_is_read_too() -> None:
    p = pod()
    p["spec"]["containers"].append({"name": "ssh", "image": "ssh", "command": ["bash", "-c", "sshd -D -e"]})
    assert "ssh: sshd listens on port 22" in reasons_of(p)[reasons.SSHD_ON_NODE_PORT]


def test_multus_on_a_host_network_pod_is_warned() -> None:
    nets = ",".join(f"sriov-{i}" for i in range(16))
    said = reasons_of(pod(metadata={"annotations": {hazards.MULTUS_NETWORKS: nets}}))[reasons.MULTUS_ON_HOST_NETWORK]
    assert said.startswith("16 Multus network attachments (sriov-0, ") and "and 8 more" in said
    assert "Drop hostNetwork" in said
    assert reasons.MULTUS_ON_HOST_NETWORK not in reasons_of(pod())


def test_a_dra_claim_on_a_host_network_pod_is_warned_unless_it_carries_no_nics() -> None:
    claimed = pod(container={"resources": {"claims": [{"name": "nics"}]}},
                  resourceClaims=[{"name": "nics", "resourceClaimTemplateName": "t"}])  # fmt: skip
    said = reasons_of(claimed)[reasons.DRA_CLAIM_ON_HOST_NETWORK]
    assert "google/dranet pkg/driver/nri_hooks.go" in said and "never starts" in said
    no_nics = copy.deepcopy(claimed)
    no_nics["metadata"]["annotations"] = {"hostnet-rdma.io/allocated-nics": "false"}
    assert reasons.DRA_CLAIM_ON_HOST_NETWORK not in reasons_of(no_nics)
    assert reasons.DRA_CLAIM_ON_HOST_NETWORK not in reasons_of(claimed, InjectConfig(dra_claims_carry_nics=False))


def test_a_pod_whose_gpus_come_from_a_dra_claim_is_a_training_pod() -> None:
    """As one with nvidia.com/gpu is: without the claim it is left unchanged (no label, no torchrun)."""
    claimed = pod(container={"resources": {"claims": [{"name": "gpus"}]}},
                  resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "t"}])  # fmt: skip
    claimed["spec"]["containers"].insert(0, {"name": "sidecar", "image": "proxy"})
    result = mutate(claimed, Params(namespace="ml"))
    assert result.info is not None and result.training == ["main"], result.reason
    assert training_containers(claimed, InjectConfig()) == ["main"]
    bare = copy.deepcopy(claimed)
    del bare["spec"]["containers"][1]["resources"]
    assert mutate(bare, Params(namespace="ml")).info is None


def twin(name: str) -> tuple[dict[str, Any], list[str]]:
    case = yaml.safe_load((GOLDEN / f"{name}.yaml").read_text())
    case["metadata"]["name"] = "gpu-twin-worker-0"  # one name for both (the goldens differ in it)
    result = mutate(case, Params(namespace="default", wrapper_payload="<wrapper-payload>", version="test"))
    return result.pod, [w.reason for w in result.warnings]


def test_the_dra_twin_is_plumbed_as_its_extended_resource_twin() -> None:
    """tests/golden/mpijob/{dra,extended}-twin-worker-0: the same MPIJob worker (no opt-in label),
    its GPUs and NICs from a DRA claim or from nvidia.com/gpu + rdma/*. Mutated, they differ only
    in what the allocator already provides (the resources themselves, and the allocator the status
    annotation names) and the DRA warning."""
    dra, dra_said = twin("dra-twin-worker-0")
    ext, ext_said = twin("extended-twin-worker-0")
    assert dra_said == [reasons.DRA_CLAIM_ON_HOST_NETWORK] and ext_said == []
    for p in (dra, ext):
        p["spec"]["containers"][0].pop("resources")
        p["spec"].pop("resourceClaims", None)
        status = json.loads(p["metadata"]["annotations"].pop("hostnet-rdma.io/injected"))
        assert status["skipped"].pop("infiniband") == status["skipped"].pop("privileged")
        p["metadata"]["status"] = status
    assert dra == ext


def test_the_preview_says_when_mpirun_is_not_told_the_workers_ssh_port() -> None:
    """Admission sees one pod at a time; the preview sees the MPIJob's workers and launcher."""
    job = yaml.safe_load((Path(__file__).parent / "corpus/hostnet/mpijob-sshd-2222-rsh-args.yaml").read_text())
    cfg = InjectConfig()

    def warned(obj: dict[str, Any]) -> list[str]:
        rows = preview.rows(controllers.expand([obj], "default", None), lambda ns: review.params_for(cfg, ns),
                            selection.from_config(cfg), None)  # fmt: skip
        return [w for r in rows for w in r.warnings if "sshd listens on port" in w]

    assert warned(job) == []
    untold = copy.deepcopy(job)
    launcher = untold["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher.pop("env")
    launcher["args"] = [launcher["args"][0].replace('-mca plm_rsh_args "-p 2222"', "")]
    said = warned(untold)
    assert len(said) == 2 and all("not told a port, so it dials 22" in w for w in said), said
    # The operator's OMPI_MCA_plm_rsh_args comes after the user's and wins: the user's does not count.
    launcher["env"] = [{"name": "OMPI_MCA_plm_rsh_args", "value": "-p 2222"}]
    assert len(warned(untold)) == 2


def test_reading_a_large_command_for_sshd_stays_bounded() -> None:
    """The command is the tenant's: over the analysed size it is not split (no warning), and a
    command that never names sshd is not split at all."""
    big = "sshd -D; " + "echo x; " * 40_000
    t0 = time.process_time()
    assert hazards.sshd_of({"name": "w", "command": ["bash", "-c", big]}) is None
    assert hazards.sshd_of({"name": "w", "command": ["bash", "-c", "echo x; " * 40_000]}) is None
    assert time.process_time() - t0 < 0.05


def test_a_pod_s_commands_are_read_for_sshd_within_one_budget() -> None:
    """16 containers of 63 KiB scripts that name sshd: only budget.SSHD_READ_BYTES of them are read
    (each under the per-command bound, so without the pod's budget all 16 would be split)."""
    script = ("sshd -p \"$X\" 'a b' \\\n; " * 3000)[:63_000]
    many = {"spec": {"containers": [{"name": f"c{i}", "command": ["bash", "-c", script]} for i in range(16)]}}
    said: list[str] = []
    t0 = time.process_time()
    hazards.check(many, lambda reason, text: said.append(text), True)
    assert time.process_time() - t0 < 0.1
    assert budget.SSHD_READ_BYTES // 63_000 == 1 and said == []  # one read: -p "$X", its port known at run time
    assert hazards.sshd_of(many["spec"]["containers"][0]) == hazards.Sshd(
        "c0", (), "-p, some known only at run time", ""
    )


class FakeObjects:
    """app.kube.Objects over a dict: what `explain -f --from-cluster` reads of DRA."""

    def __init__(self, held: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.held = held
        self.asked: list[tuple[str, str, str]] = []

    def served(self, api_version: str, kind: str) -> bool:
        return api_version == "resource.k8s.io/v1"

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append((kind, namespace, name))
        return self.held.get((kind, name))


def test_the_claim_templates_a_file_names_are_read_from_the_cluster() -> None:
    from app.cli.common import cluster_claim_objects

    docs = list(
        yaml.safe_load_all((Path(__file__).parent / "corpus/hostnet/mpijob-dranet-numa-aligned.yaml").read_text())
    )
    job = [d for d in docs if d["kind"] == "MPIJob"]
    held = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] != "MPIJob"}
    objs = FakeObjects(held)
    found = cluster_claim_objects(objs, "ml", job)
    assert [d["kind"] for d in found] == ["ResourceClaimTemplate", "DeviceClass"], objs.asked
    assert ("ResourceClaimTemplate", "ml", "gpu-nic-aligned") in objs.asked
    line = preview.claim_templates([*job, *found])["gpu-nic-aligned"]
    assert line == ["gpu.nvidia.com (GPUs from NVIDIA's DRA driver)", "dranet (NICs from dranet)"]
    assert cluster_claim_objects(FakeObjects({}), "ml", docs) == []  # the file holds it: nothing asked


def test_another_program_s_port_is_not_sshd_s() -> None:
    """Only a Port line written into sshd_config stands for sshd's config, not a server's --port."""
    found = hazards.sshd_of({"name": "w", "command": ["bash", "-c", "tensorboard --port 6006 & /usr/sbin/sshd -D"]})
    assert found is not None and found.ports == (22,), found
    echo = ["bash", "-c", 'echo "Port 2222" > /tmp/notes; /usr/sbin/sshd -D']  # not sshd_config
    assert hazards.sshd_of({"name": "w", "command": echo}) == hazards.Sshd("w", (22,), "default", "")
