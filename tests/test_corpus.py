"""The job files users copy from the launchers' own repositories (tests/corpus/, each with its
source and commit in its first line), edited only to add `hostNetwork: true` to every pod
template (done here, so the files stay verbatim). For each, the preview must account for every
object and give every job a verdict a user can act on: one store host and a local address for
each pod, or a named refusal, or a named kind it cannot expand. And where a pod runs torchrun,
the decision the wrapper makes at run time on the argv **bash** produces (a fake `torchrun`
first on PATH records it) equals the preview's. tests/corpus/README.md has the table."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import preview
from app.cli.common import preview_config
from app.cli.explain import data
from app.core import selection
from app.core import wrap as core_wrap
from app.preview import controllers, shellread
from app.webhook import review
from app.wrapper import rules

CORPUS = Path(__file__).parent / "corpus"
RUNTIME = CORPUS / "trainer" / "runtime-torch-distributed.yaml"
FILES = sorted(p for p in CORPUS.glob("*/*.yaml") if p != RUNTIME)
# What each file's preview says, as tests/corpus/README.md's table shows it: ok (every pod's
# rendezvous previewed, one store host per job), refused (named), own (the program's own
# rendezvous: no torchrun), none (plumbed, but runs no torch.distributed we can see), mpi (mpirun
# over ssh: each worker's NCCL settings also in its /etc/nccl.conf), plain (no training pod: left
# as it is), unexpanded (named, exit 4).
VERDICTS = {
    "jobset/pytorch-cnn-mnist": "ok", "jobset/pytorch-mnist": "ok",
    "jobset/pytorch-resnet": "refused", "jobset/pytorch-resnet-cifar10": "refused",
    "jobset/pytorch-v1alpha1": "refused",
    "kueue/appwrapper-pytorch-sample": "own", "kueue/appwrapper-leaderworkerset-sample": "entrypoint",
    "kueue/sample-job": "plain", "mpi-operator/nccl-tests": "mpi",
    "kueue/sample-jobset-tas-required": "none", "kueue/sample-pytorchjob": "own",
    "lws/sample": "entrypoint", "lws/sglang": "own", "lws/tensorrt-llm": "script", "lws/vllm-gpu": "script",
    "trainer/multi-node": "own", "trainer/pytorch-simple": "own",
    "training-operator/cpu-demo": "ok", "training-operator/deepspeed-demo": "ok",
    "training-operator/elastic-echo": "ok", "training-operator/elastic-imagenet": "ok",
    "training-operator/mnist-gloo": "entrypoint", "training-operator/mnist-nccl": "entrypoint",
    "training-operator/mnist2-sample": "own", "training-operator/sendrecv": "entrypoint",
    "training-operator/simple": "own", "volcano/pytorch-plugin": "entrypoint",
    # Issues 52 and 53: GPU clouds' and vendors' files (templates filled in: FILLS).
    "allocators/aws-fsdp-llama3-1-8b-pytorchjob-efa": "ok",
    "allocators/aws-nccl-tests-mpijob-efa": "mpi",
    "allocators/dranet-gke-rdma-statefulset-dra-claim": "script",
    "allocators/dranet-mpijob-nccl-test-dra-claim": "mpi",
    # Issue 67: its GPUs and NICs come from a DRA claim: a training pod, as with nvidia.com/gpu.
    "allocators/dranet-nvidia-gpu-nic-aligned-statefulset": "script",
    "allocators/gke-a4-nccl-test-networking-gke-io-rdma-interfaces": "script",
    "allocators/gke-managed-rdma-nccl-test-mrdma-claim": "script",
    "allocators/netop-hostdev-pod": "none",
    "allocators/netop-rdma-shared-device-gpu-pod": "entrypoint",
    "allocators/netop-sriov-legacy-pod": "none",
    "allocators/sriov-dp-intel-pod": "none",
    "allocators/sriov-dp-openshift-testpmd-pod": "entrypoint",
    "argo/volcano-argo-mpi-hello-world": "unexpanded",
    "jobset/gke-a4x-max-nccl-jobset": "script",
    "other/gke-tcpxo-nccl-test-pods": "script",
    "ray/aws-verl-raycluster-efa": "unexpanded",
    "ray/kuberay-rayjob-pytorch-mnist": "unexpanded",
    "ray/kuberay-rayjob-pytorch-text-classifier": "unexpanded",
    "trainer/runtime-deepspeed-distributed": "own",
    "trainer/runtime-torchtune-llama3-2-1b": "own",
    "trainer/trainjob-multi-step": "own",
    "trainer/trainjob-runtime-patches": "ok",
    "trainer/trainjob-volcano-integration": "own",
    "training-operator/aws-fsdp-llama3-2-1b-envsubst": "ok",
    "training-operator/aws-hyperpod-imagenet-etcd-elastic-wget": "ok",
    "volcano/nebius-llama-cookbook-finetuning-2": "ok",
    "volcano/nebius-nccl-test-pytorch": "ok",
    # Issue 67: what else breaks on the host network (shapes with made-up names).
    "hostnet/mpijob-dranet-numa-aligned": "mpi",
    "hostnet/mpijob-multus-sriov": "mpi",
    "hostnet/mpijob-sshd-2222-rsh-args": "mpi",
    "hostnet/statefulset-nccl-test-sshd-default-port": "none",
}  # fmt: skip


def pod_specs(x: Any) -> Iterator[dict[str, Any]]:
    """Every pod spec (a dict with a list of containers) anywhere in x."""
    if isinstance(x, dict):
        if isinstance(x.get("containers"), list):
            yield x
        for v in x.values():
            yield from pod_specs(v)
    elif isinstance(x, list):
        for v in x:
            yield from pod_specs(v)


def host_network(x: Any) -> None:
    for spec in pod_specs(x):
        spec["hostNetwork"] = True


# Templates, filled in as their READMEs say (envsubst of these names; sed of __NUM_NODES__) before
# the preview; unfilled, the preview stops at the placeholder and says so.
_AWS = {
    "NUM_NODES": "2",
    "GPU_PER_NODE": "8",
    "EFA_PER_NODE": "32",
    "FI_PROVIDER": "efa",
    "HF_TOKEN": "hf_x",
    "IMAGE_URI": "123456789012.dkr.ecr.us-west-2.amazonaws.com/fsdp:pytorch2.5.1",
    "INSTANCE_TYPE": "p5.48xlarge",
}
FILLS: dict[str, dict[str, str]] = {
    "allocators/aws-fsdp-llama3-1-8b-pytorchjob-efa": _AWS,
    "training-operator/aws-fsdp-llama3-2-1b-envsubst": _AWS,
    "jobset/gke-a4x-max-nccl-jobset": {"__NUM_NODES__": "2"},
}  # fmt: skip


def fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        pattern = re.escape(name) if name.startswith("__") else rf"\$\{{{name}\}}|\${name}\b"
        text = re.sub(pattern, value, text)
    return text


def load(path: Path, filled: bool = True) -> list[dict[str, Any]]:
    text = path.read_text()
    if filled:
        text = fill(text, FILLS.get(f"{path.parent.name}/{path.stem}", {}))
    docs = [d for d in yaml.safe_load_all(text) if d]
    # A TrainJob that names the runtime Trainer ships gets it, as the cluster has it.
    runtime = yaml.safe_load(RUNTIME.read_text())
    if any(d.get("kind") == "TrainJob" and (d.get("spec") or {}).get("runtimeRef", {}).get("name")
           == runtime["metadata"]["name"] for d in docs):  # fmt: skip
        docs.append(runtime)
    host_network(docs)
    return docs


def preview_with_configmaps(
    docs: list[dict[str, Any]],
) -> tuple[list[preview.Row], list[Any], dict[str, dict[str, str]]]:
    cfg = preview_config(None, None)  # the chart's defaults, as `explain -f` previews
    expansions = controllers.expand(docs, "default", None)
    configmaps = {k: v for ex in expansions for k, v in ex.configmaps.items()}
    rows = preview.rows(expansions, lambda ns: review.params_for(cfg, ns), selection.from_config(cfg), None, configmaps)
    return rows, [ex for ex in expansions if not ex.pods], configmaps


def preview_of(docs: list[dict[str, Any]]) -> tuple[list[preview.Row], list[Any]]:
    rows, others, _ = preview_with_configmaps(docs)
    return rows, others


# The verdicts of files whose own command runs torchrun: bash's argv is held to the preview.
TORCHRUN_VERDICTS = ("ok", "refused", "runtime")
# The files where the preview says "decided at run time" for a named rendezvous flag.
RUN_TIME: list[str] = []


def judged(rows: list[preview.Row]) -> list[preview.Row]:
    """The rows a file's verdict is about: a TrainJob's initializers run their images'
    entrypoints beside the nodes, so where both are there, the nodes."""
    entry = [r for r in rows if r.mutated and r.backend.startswith("decided at run time: no command")]
    if entry and len(entry) < len([r for r in rows if r.mutated]):
        return [r for r in rows if r not in entry]
    return rows


def verdict(rows: list[preview.Row], others: list[Any]) -> str:
    if any(ex.unexpanded for ex in others):
        return "unexpanded"
    rows = judged(rows)
    if any(r.refusal for r in rows):
        return "refused"
    if all(r.result is not None and r.result.info is None for r in rows):
        return "plain"
    if all(r.backend.startswith("no torchrun and no MASTER_ADDR") for r in rows if r.mutated):
        return "none"
    if any(r.backend.startswith("decided at run time (") for r in rows if r.mutated):
        return "runtime"  # a rendezvous flag known only when the pod runs, named
    if all(r.backend.startswith("decided at run time: the command runs") for r in rows if r.mutated):
        return "script"
    if all(r.backend.startswith("decided at run time: no command") for r in rows if r.mutated):
        return "entrypoint"
    if all(r.backend.startswith("mpirun over ssh") for r in rows if r.mutated):
        # sshd drops the pod's env: each worker's NCCL settings are in its /etc/nccl.conf too.
        assert all("hostnet-rdma.io/nccl-conf" in r.pod_after["metadata"]["annotations"] for r in rows if r.mutated)
        return "mpi"
    if all(r.backend.startswith(("env://", "the program's own")) for r in rows if r.mutated):
        return "own"
    return "ok"


def test_the_corpus_is_as_documented() -> None:
    assert len(FILES) >= 50
    assert {f"{p.parent.name}/{p.stem}" for p in FILES} == set(VERDICTS)
    for p in [*FILES, RUNTIME]:
        first = p.read_text().splitlines()[0]
        if first.startswith("# Shape: made-up names, in the shape of "):
            continue  # a public file's shape, where its licence keeps the file out (README)
        assert first.startswith("# Corpus: https://github.com/") and "/blob/" in first, p


# Issue 67: the hazards of the host network each file is warned of at admission (the reasons of
# app/core/reasons.py), and those it must not be: a file that already does the fix.
HAZARD_REASONS = ("SshdOnNodePort", "MultusOnHostNetwork", "DRAClaimOnHostNetwork")
HAZARDS = {
    "mpi-operator/nccl-tests": {"SshdOnNodePort"},  # the operator's default worker command: sshd -De
    "allocators/aws-nccl-tests-mpijob-efa": {"SshdOnNodePort"},
    "allocators/dranet-mpijob-nccl-test-dra-claim": {"SshdOnNodePort", "DRAClaimOnHostNetwork"},
    "allocators/dranet-nvidia-gpu-nic-aligned-statefulset": {"DRAClaimOnHostNetwork"},
    "allocators/dranet-gke-rdma-statefulset-dra-claim": {"DRAClaimOnHostNetwork"},
    "allocators/gke-managed-rdma-nccl-test-mrdma-claim": {"DRAClaimOnHostNetwork"},
    "jobset/gke-a4x-max-nccl-jobset": {"DRAClaimOnHostNetwork"},
    "allocators/netop-hostdev-pod": {"MultusOnHostNetwork"},
    "allocators/netop-rdma-shared-device-gpu-pod": {"MultusOnHostNetwork"},
    "allocators/netop-sriov-legacy-pod": {"MultusOnHostNetwork"},
    "hostnet/statefulset-nccl-test-sshd-default-port": {"SshdOnNodePort"},
    "hostnet/mpijob-sshd-2222-rsh-args": set(),  # sshd -p 2222, mpirun's ssh told: nothing to say
    "hostnet/mpijob-multus-sriov": {"SshdOnNodePort", "MultusOnHostNetwork"},
    "hostnet/mpijob-dranet-numa-aligned": {"SshdOnNodePort", "DRAClaimOnHostNetwork"},
    # Trainer's DeepSpeed runtime: sshd -f ~/.sshd_config, the MPI Operator's (Port 2222).
    "trainer/runtime-deepspeed-distributed": set(),
}  # fmt: skip


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_host_network_hazard_is_warned_with_its_reason(path: Path) -> None:
    key = f"{path.parent.name}/{path.stem}"
    rows, _ = preview_of(load(path))
    said = {w.reason for r in rows if r.result is not None for w in r.result.warnings if w.reason in HAZARD_REASONS}
    assert said == HAZARDS.get(key, set()), (key, said)


def test_the_preview_names_the_claims_device_classes_and_the_workers_ssh_port() -> None:
    """Where the file holds the ResourceClaimTemplate and DeviceClass, the preview says what the
    claim asks for (dranet's NICs: the sandbox is refused); an MPIJob whose workers' sshd is on
    2222 and whose launcher is told 2222 gets no word of ssh at all."""
    docs = load(CORPUS / "hostnet/mpijob-dranet-numa-aligned.yaml")
    cfg = preview_config(None, None)
    expansions = controllers.expand(docs, "default", None)
    rows = preview.rows(expansions, lambda ns: review.params_for(cfg, ns), selection.from_config(cfg), None, {},
                        preview.claim_templates(docs))  # fmt: skip
    workers = [r for r in rows if "-worker-" in r.pod]
    assert len(workers) == 2 and all(r.mutated for r in workers)
    for r in workers:
        line = next(w for w in r.warnings if w.startswith("DRA claim gpu-nic: "))
        assert "gpu.nvidia.com (GPUs from NVIDIA's DRA driver)" in line and "dranet (NICs from dranet)" in line, line
        assert "never starts" in line, line
    rows, _ = preview_of(load(CORPUS / "hostnet/mpijob-sshd-2222-rsh-args.yaml"))
    assert not [w for r in rows for w in r.warnings if "sshd" in w], [r.warnings for r in rows]


# The allocator each file's NIC-carrying pods name (issue 52): they get no privileged, no
# SYS_ADMIN and no /dev/infiniband hostPath, and the status annotation says why.
ALLOCATED = {
    "allocators/aws-fsdp-llama3-1-8b-pytorchjob-efa": "AWS EFA device plugin (vpc.amazonaws.com/efa)",
    "allocators/aws-nccl-tests-mpijob-efa": "AWS EFA device plugin (vpc.amazonaws.com/efa)",
    "allocators/dranet-gke-rdma-statefulset-dra-claim": "a DRA resource claim (rdma-net-interface)",
    "allocators/dranet-mpijob-nccl-test-dra-claim": "a DRA resource claim (worker-rdma-nic)",
    "allocators/gke-managed-rdma-nccl-test-mrdma-claim": "a DRA resource claim (rdma)",
    "allocators/netop-hostdev-pod": "host-device plugin (nvidia.com/hostdev)",
    "allocators/netop-rdma-shared-device-gpu-pod": "RDMA shared device plugin (rdma/rdma_shared_device_a)",
    "allocators/netop-sriov-legacy-pod": "(nvidia.com/sriovlegacy)",
    "allocators/sriov-dp-intel-pod": "SR-IOV network device plugin (its default prefix) (intel.com/sriov)",
    "allocators/sriov-dp-openshift-testpmd-pod": "OpenShift's SR-IOV network device plugin (openshift.io/",
    "jobset/gke-a4x-max-nccl-jobset": "a DRA resource claim (compute-domain-channel, rdma)",
    "training-operator/aws-fsdp-llama3-2-1b-envsubst": "AWS EFA device plugin (vpc.amazonaws.com/efa)",
    "volcano/nebius-nccl-test-pytorch": "",  # its own /dev/infiniband hostPath, no allocator
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(ALLOCATED))
def test_pods_whose_nics_an_allocator_hands_out_are_not_privileged(key: str) -> None:
    rows, _ = preview_of(load(CORPUS / f"{key}.yaml"))
    mutated = [r for r in rows if r.mutated and r.result is not None]
    assert mutated, key
    for r in mutated:
        pod = r.pod_after
        skipped = json.loads(pod["metadata"]["annotations"]["hostnet-rdma.io/injected"]).get("skipped", {})
        if not ALLOCATED[key]:
            assert "privileged" not in skipped or "allocator" not in skipped["privileged"], (r.pod, skipped)
            continue
        assert ALLOCATED[key] in skipped.get("privileged", "") and ALLOCATED[key] in skipped.get("infiniband", ""), (
            r.pod, skipped)  # fmt: skip
        before = {c["name"]: (c.get("securityContext") or {}) for c in r.before["spec"]["containers"]}
        for c in pod["spec"]["containers"]:
            sc = c.get("securityContext") or {}
            caps = (sc.get("capabilities") or {}).get("add") or []
            # What the user's file set stays (a vendor file may ask for privileged itself).
            assert not sc.get("privileged") or before.get(c["name"], {}).get("privileged"), (r.pod, c["name"])
            assert "SYS_ADMIN" not in caps or "SYS_ADMIN" in str(before.get(c["name"])), (r.pod, c["name"])
        hostpaths = {v["hostPath"]["path"] for v in pod["spec"].get("volumes") or [] if "hostPath" in v}
        before_paths = {v["hostPath"]["path"] for v in r.before["spec"].get("volumes") or [] if "hostPath" in v}
        assert "/dev/infiniband" not in hostpaths - before_paths, (r.pod, hostpaths)


@pytest.mark.parametrize("key", sorted(FILLS))
def test_an_unfilled_template_stops_at_its_placeholder_and_says_so(key: str) -> None:
    with pytest.raises(controllers.ExpandError, match=r"is not a count: .*a template's placeholder\? Fill"):
        preview_of(load(CORPUS / f"{key}.yaml", filled=False))


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_corpus_job_gets_a_verdict_a_user_can_act_on(path: Path) -> None:
    rows, others = preview_of(load(path))
    said = verdict(rows, others)
    assert said == VERDICTS[f"{path.parent.name}/{path.stem}"], [(r.pod, r.backend, r.refusal, r.reason) for r in rows]
    if said == "unexpanded":
        assert others and all(ex.note for ex in others), others
        return
    assert rows
    for r in rows:
        if said == "refused":
            assert r.refusal, r.pod  # every pod says why its wrapper would refuse
        elif said in ("ok", "own") and r.mutated:
            assert r.local_addr or not core_wrap.is_wrapped(_container(r)), r.pod
    if said in ("ok", "own"):
        # One store host per job wherever the rows say who hosts (LWS's own rendezvous: its leader).
        assert not preview.store_problems([r for r in rows if r.store_host in ("yes", "no")]), rows
    code = data(rows, [], 0)["exitCode"]
    assert code == (1 if said == "refused" else 0), (path, code)


def _container(r: preview.Row) -> dict[str, Any]:
    assert r.result is not None
    return next(c for c in r.result.pod["spec"]["containers"] if c["name"] == r.result.training[0])


# ------------------------------------------------------------------------------ bash's argv
FAKE = """#!{python}
import json, os, sys
with open(os.environ["ARGV_OUT"], "w") as f:
    json.dump(sys.argv[1:] if not sys.argv[0].endswith("python") else sys.argv[3:], f)
"""


HOSTNAME = "#!/bin/sh\necho node-a\n"  # `hostname -s`, `hostname`: a name the node has


def bash_argv(
    container: dict[str, Any], env: dict[str, str], tmp: Path, argv: list[str] | None = None
) -> list[str] | None:
    """The argv bash hands torchrun for this container's command (as the kubelet expanded it:
    `argv`) and env (None: no torchrun ran)."""
    argv = core_wrap.original_argv(container) if argv is None else argv
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("torchrun", "python", "python3"):
        (bindir / name).write_text(FAKE.format(python=sys.executable))
        (bindir / name).chmod(0o755)
    (bindir / "hostname").write_text(HOSTNAME)
    (bindir / "hostname").chmod(0o755)
    # What the script runs besides torchrun is not there (pip, nvidia-smi, /workspace): under
    # `set -e` it would stop the script first. BASH_ENV (read by bash -c) makes each a success.
    (tmp / "bash_env").write_text(
        'command_not_found_handle() { return 0; }\ncd() { builtin cd "$@" 2>/dev/null || true; }\n'
    )
    out = tmp / "argv.json"
    out.unlink(missing_ok=True)
    # Only the fakes on PATH: nothing else of the command runs (pip, sleep, install scripts).
    run_env = {**env, "PATH": str(bindir), "ARGV_OUT": str(out), "HOME": str(tmp), "BASH_ENV": str(tmp / "bash_env")}
    # `/usr/local/bin/torchrun`: the wrapper's start-up hook catches it by absolute path too
    # (sitecustomize); here the fake stands in for it.
    argv = [re.sub(r"(?<![\w.-])/[\w./-]*/torchrun\b", "torchrun", a) for a in argv]
    if argv and os.path.basename(argv[0]) in ("bash", "sh"):
        argv = [shutil.which("bash") or "/bin/bash", *argv[1:]]
    else:
        argv = [str(bindir / os.path.basename(argv[0])), *argv[1:]] if argv else []
    if not argv:
        return None
    subprocess.run(argv, env=run_env, cwd=tmp, capture_output=True, timeout=30)
    if not out.exists():
        return None
    got: list[str] = json.loads(out.read_text())
    # `python -m torch.distributed.run ARGS`: the fake python saw `-m torch.distributed.run ARGS`.
    return got


@pytest.mark.parametrize("path", [p for p in FILES if VERDICTS.get(f"{p.parent.name}/{p.stem}") in TORCHRUN_VERDICTS],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")  # fmt: skip
def test_the_run_time_decision_on_bashs_argv_equals_the_preview(path: Path, tmp_path: Path) -> None:
    rows, _, configmaps = preview_with_configmaps(load(path))
    compared = 0
    for r in rows:
        if r.result is None or r.result.info is None or not core_wrap.is_wrapped(_container(r)):
            continue  # a pod beside the job (an etcd Deployment, an initializer's entrypoint)
        compared += 1
        c = _container(r)
        env = preview.runtime_env(r.result.pod, c, configmaps)
        settings = core_wrap.settings_of(c)
        kubelet = shellread.kubelet_argv(core_wrap.original_argv(c), preview.kubelet_env(r.result.pod, c, configmaps))
        argv = bash_argv(c, env, tmp_path, kubelet)
        assert argv is not None, r.pod
        if r.backend.startswith("decided at run time ("):  # a rendezvous flag named: nothing to compare
            RUN_TIME.append(f"{path.parent.name}/{path.stem}")
            continue
        full = rules.unpack({**env, rules.ENV_POD: settings or ""})
        try:
            _, plan = rules.merge(argv, full)
        except rules.ArgvError as e:
            assert r.refusal and str(e) in r.refusal, (r.pod, e)
            continue
        if r.refusal:
            assert plan.fatal and plan.fatal in r.refusal, (r.pod, plan.fatal, r.refusal)
            continue
        assert (plan.endpoint or "-") == (r.endpoint or "-"), (r.pod, plan.endpoint, r.endpoint)
        if plan.backend == "static":  # node rank 0 hosts the store at --master-addr
            rank = rules.effective(rules.Argv(argv), full, "--node-rank")[0]
            assert ("yes" if rank == "0" else "no" if rank else "node rank 0") == r.store_host, (r.pod, rank)
            assert (rules.effective(rules.Argv(argv), full, "--nnodes")[0] or "1") == r.nnodes, r.pod
            continue
        assert plan.local_addr == r.local_addr, (r.pod, plan.local_addr, r.local_addr)
        host = {"true": "yes", "false": "no"}.get(str(plan.is_host), r.store_host)
        assert host == r.store_host, (r.pod, plan.is_host, r.store_host)
    assert compared, path  # the file's torchrun pods were held to bash


def corpus_table() -> str:
    """tests/corpus/README.md's table, from the previews themselves (`REFRESH_GOLDEN=1` writes it)."""
    lines = ["| file | launcher | pods | store hosts | verdict |", "|---|---|---|---|---|"]
    for path in FILES:
        rows, others = preview_of(load(path))
        launchers = sorted({r.launcher for r in rows if r.launcher}) or [ex.source.split("/")[0] for ex in others]
        hosts = [r.pod for r in rows if r.store_host == "yes"]
        said = verdict(rows, others)
        first = next((r for r in judged(rows) if r.mutated), rows[0] if rows else None)
        backend = first.backend if first else ""
        detail = {"refused": next((r.refusal for r in rows if r.refusal), "")[:90] + "…",
                  "unexpanded": next((ex.note for ex in others if ex.unexpanded), "")[:90] + "…",
                  "own": backend, "none": backend, "mpi": backend, "script": backend[:90] + "…",
                  "entrypoint": backend[:90] + "…",
                  "runtime": next((r.backend for r in rows if r.backend.startswith("decided at run time (")), "")[:90] + "…",
                  "plain": rows[0].reason[:90] + "…" if rows else "",
                  "ok": f"{backend} rendezvous" if rows else ""}[said]  # fmt: skip
        lines.append(f"| `{path.parent.name}/{path.name}` | {', '.join(launchers)} | {len(rows)} | "
                     f"{', '.join(hosts) or '-'} | **{said}**: {detail} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def test_the_corpus_readme_table_is_what_the_preview_says() -> None:
    readme = CORPUS / "README.md"
    table = corpus_table()
    if os.environ.get("REFRESH_GOLDEN"):
        head = readme.read_text().split("| file |")[0]
        readme.write_text(head + table)
    assert table in readme.read_text()
