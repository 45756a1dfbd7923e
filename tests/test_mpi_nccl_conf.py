"""MPIJob workers: mpirun starts the ranks over ssh, and sshd gives each session an empty
environment, so a worker's NCCL_* env never reaches NCCL. The webhook writes it to the worker's
/etc/nccl.conf too. This judges the run on the GPU machine that says NCCL reads that file in a
process with an empty environment, below the env and ~/.nccl.conf
(scripts/device/nccl-conf.py, tests/logs/nccl-conf-h200/), and holds the core to it. The real
ssh session into a worker's sshd on the cluster tier:
tests/cluster/test_launchers.py::test_corpus_files_through_the_real_controllers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from app.core import InjectConfig, Params, mutate, names, reasons
from app.wrapper import payload

LOG = Path(__file__).parent / "logs" / "nccl-conf-h200" / "nccl-conf.json"
WORKER = Path(__file__).parent / "golden" / "mpijob" / "nccl-tests-worker-0.yaml"
PARAMS = Params(InjectConfig(), "ml", payload(), "test")


def _case(start: str) -> dict[str, Any]:
    cases: list[dict[str, Any]] = json.loads(LOG.read_text())["cases"]
    return next(c for c in cases if c["case"].startswith(start))


def test_nccl_reads_etc_nccl_conf_with_an_empty_environment_and_the_env_wins() -> None:
    assert all(c["rc"] == 0 for c in json.loads(LOG.read_text())["cases"])  # every all_reduce completed
    assert _case("no file")["nccl_lines"] == 0  # NCCL_DEBUG unset: silent
    read = _case("/etc/nccl.conf")
    assert read["env"] == {} and "NCCL_SOCKET_IFNAME set by environment to lo" in read["said"]
    assert "NCCL_BUFFSIZE set by environment to 8388608." in read["said"]
    env = _case("the file and NCCL_SOCKET_IFNAME")
    iface = env["env"]["NCCL_SOCKET_IFNAME"]
    assert f"NCCL_SOCKET_IFNAME set by environment to {iface}" in env["said"] and iface != "lo"
    assert "NCCL_BUFFSIZE set by environment to 4194304." in _case("the file and ~/.nccl.conf")["said"]


def _worker() -> dict[str, Any]:
    return dict(yaml.safe_load(WORKER.read_text()))


def _mounts(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in pod["spec"]["containers"][0].get("volumeMounts") or [] if m["mountPath"] == "/etc/nccl.conf"]


def test_a_workers_nccl_env_is_its_etc_nccl_conf() -> None:
    r = mutate(_worker(), PARAMS)
    env = [(e["name"], e["value"]) for e in r.pod["spec"]["containers"][0]["env"] if e["name"].startswith("NCCL_")]
    assert env and r.pod["metadata"]["annotations"][names.ANN_NCCL_CONF] == "".join(f"{k}={v}\n" for k, v in env)
    (mount,) = _mounts(r.pod)
    assert mount == {
        "name": names.VOL_NCCL_CONF,
        "mountPath": "/etc/nccl.conf",
        "subPath": "nccl.conf",
        "readOnly": True,
    }
    (vol,) = [v for v in r.pod["spec"]["volumes"] if v["name"] == names.VOL_NCCL_CONF]
    (item,) = vol["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{names.ANN_NCCL_CONF}']"
    # Only the host network's port 22 (issue 67: the worker's `sshd -De`) is said; nothing of NCCL's env.
    assert [w.reason for w in r.warnings] == [reasons.SSHD_ON_NODE_PORT]
    assert mutate(r.pod, PARAMS).pod == r.pod  # a second pass changes nothing


def test_what_cannot_go_to_the_file_is_named_and_a_users_own_file_is_kept() -> None:
    pod = _worker()
    c = pod["spec"]["containers"][0]
    c["env"] = [{"name": "NCCL_IB_HCA", "valueFrom": {"configMapKeyRef": {"name": "site", "key": "hca"}}},
                {"name": "NCCL_ALGO", "value": "Ring\nNCCL_PROTO=Simple"}, {"name": "UCX_TLS", "value": "rc"},
                {"name": "NCCL_IB_HCA_LONG", "value": "mlx5_" * 300}]  # fmt: skip
    r = mutate(copy.deepcopy(pod), PARAMS)
    conf = r.pod["metadata"]["annotations"][names.ANN_NCCL_CONF]
    assert "NCCL_IB_HCA" not in conf and "NCCL_ALGO" not in conf and "UCX_TLS" not in conf
    (warning,) = [w.text for w in r.warnings if w.text.startswith("MPIJob worker")]
    assert "NCCL_IB_HCA, NCCL_ALGO, NCCL_IB_HCA_LONG must come from the launcher, if it does not set them" in warning
    # A transport selector is never pushed on every rank (Crusoe's MPIJob warns that -x UCX_TLS breaks it).
    assert "UCX_TLS select the MPI's own transports: leave them to the launcher's settings" in warning
    assert "mpirun -x" not in warning.split("UCX_TLS select")[1]
    pod["spec"]["volumes"].append({"name": "site", "configMap": {"name": "site-nccl"}})
    c["volumeMounts"].append({"name": "site", "mountPath": "/etc/nccl.conf", "subPath": "nccl.conf"})
    r = mutate(pod, PARAMS)
    assert names.ANN_NCCL_CONF not in r.pod["metadata"].get("annotations", {})
    assert [m["name"] for m in _mounts(r.pod)] == ["site"]
    assert any("the container mounts its own" in w.text for w in r.warnings), r.warnings


def test_only_mpijob_workers_get_the_file() -> None:
    launcher = yaml.safe_load((WORKER.parent / "nccl-tests-launcher.yaml").read_text())
    launcher["metadata"]["labels"][names.INJECT_LABEL] = names.INJECT_LABEL_VALUE  # plumbed anyway
    r = mutate(launcher, PARAMS)
    assert r.changed and names.ANN_NCCL_CONF not in r.pod["metadata"].get("annotations", {}) and not _mounts(r.pod)
