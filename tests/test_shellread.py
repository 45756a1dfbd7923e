"""What the preview reads of a command before the pod runs (issue 53): the kubelet's `$(VAR)`,
the shell's variables the pod's env defines, command substitutions in flags that do not decide
the rendezvous, programs the file does not hold; and Volcano's wait-for-master init container.
The shell reading is held to real bash: a fake torchrun first on PATH records the argv bash gives
it, for the published shapes and for generated scripts."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import preview
from app.preview import controllers, shellread
from tests.test_corpus import bash_argv, preview_with_configmaps

# k8s.io/kubernetes third_party/forked/golang/expansion/expand_test.go's cases (inputs and what
# the kubelet makes of them), with VAR_A=A, VAR_B=B, VAR_C=C, VAR_REF=$(VAR_A), VAR_EMPTY="".
KUBELET = [
    ("$(VAR_A)", "A"), ("___$(VAR_B)___", "___B___"), ("$(VAR_A)-$(VAR_A)", "A-A"), ("$(VAR_A)-1", "A-1"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"), ("foo\\$(VAR_C)bar", "foo\\Cbar"), ("foo$(VAR_EMPTY)bar", "foobar"),
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"), ("f00__(VAR_A)__", "f00__(VAR_A)__"), ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"), ("$(VAR_DNE)", "$(VAR_DNE)"), ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$VAR_A)", "$VAR_A)"), ("${VAR_A}", "${VAR_A}"), ("$(VAR_B)_______$(A", "B_______$(A"),
    ("$(VAR_C)_______$(", "C_______$("), ("$(VAR_A)foobarzab$", "Afoobarzab$"), ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("$$(VAR_A)", "$(VAR_A)"), ("$$$(VAR_A)", "$A"), ("$$$$(VAR_A)", "$$(VAR_A)"), ("$(VAR_REF)", "$(VAR_A)"),
    ("$(hostname -s)", "$(hostname -s)"), ("$((1+2))", "$((1+2))"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "want"), KUBELET)
def test_the_kubelets_expansion(text: str, want: str) -> None:
    env = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
    assert shellread.kubelet_expand(text, lambda n: env.get(n, f"$({n})")) == want


def test_a_value_known_only_at_run_time_is_unknown_and_the_expansion_is_bounded() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {}}
    c = {"env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "A", "value": "x$(IP)"}, {"name": "B", "value": "$(A)"}, {"name": "C", "value": "$$(A)"},
                 {"name": "D", "value": "$(LATER)"}, {"name": "LATER", "value": "l"}]}  # fmt: skip
    env = preview.kubelet_env(pod, c, {})
    assert "A" not in env.known and "B" not in env.known and env.known["C"] == "$(A)"
    assert env.known["D"] == "$(LATER)"  # only entries before it: kept as written, as the kubelet does
    assert shellread.kubelet_argv(["--x=$(LATER)", "$(MY_SVC_SERVICE_HOST)", "$(IP)"], env) == [
        "--x=l", "$(MY_SVC_SERVICE_HOST)", "$(IP)"]  # fmt: skip
    doubling = [{"name": "E0", "value": "x" * 1024}] + [
        {"name": f"E{i}", "value": f"$(E{i - 1})$(E{i - 1})"} for i in range(1, 40)
    ]
    big = preview.kubelet_env(pod, {"env": doubling}, {})
    assert sum(map(len, big.known.values())) <= shellread.MAX_EXPANDED + 1024 and "E39" in big.unknown


# CoreWeave's PyTorchJob shape: torchrun with kubelet references and no shell.
COREWEAVE = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: cw}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          hostNetwork: true
          containers:
          - name: pytorch
            image: x
            command: [torchrun]
            args: ["--nnodes=$(WORLD_SIZE)", "--node_rank=$(RANK)", "--nproc_per_node=8", "--master_addr=$(MASTER_ADDR)",
                   "--master_port=$(MASTER_PORT)", "train.py", "--out=$$(HOME)"]
    Worker:
      replicas: 1
      template:
        spec:
          hostNetwork: true
          containers:
          - name: pytorch
            image: x
            command: [torchrun]
            args: ["--nnodes=$(WORLD_SIZE)", "--node_rank=$(RANK)", "--nproc_per_node=8", "--master_addr=$(MASTER_ADDR)",
                   "--master_port=$(MASTER_PORT)", "train.py", "--out=$$(HOME)"]
"""

# Nebius's Volcano shape: bash -c, the pytorch plugin's env in ${...}, `hostname -s` in --role.
NEBIUS = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: nb}
spec:
  minAvailable: 2
  plugins: {pytorch: ["--master=master", "--worker=worker", "--port=23456"], svc: [], env: []}
  tasks:
  - name: master
    replicas: 1
    template:
      spec:
        hostNetwork: true
        containers:
        - name: master
          image: x
          command: [bash, -c]
          args:
          - |
            set -ex
            cd /workspace
            torchrun --nnodes=${WORLD_SIZE} --node_rank=${RANK} --nproc_per_node=8 \\
              --rdzv_id=$(date +%s) --rdzv_backend=c10d --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} \\
              --role `hostname -s`: --tee 3 train.py --batch 8 2>&1 | tee /tmp/log
  - name: worker
    replicas: 1
    template:
      spec:
        hostNetwork: true
        containers:
        - name: worker
          image: x
          command: [bash, -c]
          args:
          - |
            set -ex
            cd /workspace
            torchrun --nnodes=${WORLD_SIZE} --node_rank=${RANK} --nproc_per_node=8 \\
              --rdzv_id=$(date +%s) --rdzv_backend=c10d --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} \\
              --role `hostname -s`: --tee 3 train.py --batch 8 2>&1 | tee /tmp/log
"""

# OCI's host-network RDMA guide's shape: the flags built from VC_WORKER_HOSTS with read -ra.
OCI = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: oci}
spec:
  plugins: {svc: [], env: []}
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        hostNetwork: true
        containers:
        - name: w
          image: x
          command:
          - /bin/bash
          - -c
          - |
            IFS=',' read -r -a HOSTS <<< "$VC_WORKER_HOSTS"
            NNODES=${#HOSTS[@]}
            MASTER=${HOSTS[0]}
            torchrun --nnodes=$NNODES --node-rank=$VC_TASK_INDEX --master-addr=$MASTER --master-port=29500 \\
              --nproc-per-node=8 /opt/train.py
"""


def _rows(text: str) -> list[preview.Row]:
    return preview_with_configmaps([d for d in yaml.safe_load_all(text) if d])[0]


@pytest.mark.parametrize(("text", "endpoint", "hosts"), [
    (COREWEAVE, "cw-master-0", ["yes", "no"]), (NEBIUS, "nb-master-0.nb:23456", ["yes", "no"]),
    (OCI, "oci-worker-0.oci", ["yes", "no"]),
])  # fmt: skip
def test_the_published_shapes_preview_the_run_time_decision(
    text: str, endpoint: str, hosts: list[str], tmp_path: Path
) -> None:
    """CoreWeave's `$(WORLD_SIZE)` (no shell) and Nebius's `${RANK}` + `--role \\`hostname -s\\`:` said
    "decided at run time"; OCI's `read -ra` from VC_WORKER_HOSTS showed no endpoint. Each is now
    the endpoint and store host that the run-time decision on bash's argv gives."""
    rows, _, configmaps = preview_with_configmaps([d for d in yaml.safe_load_all(text) if d])
    assert [r.store_host for r in rows] == hosts, [(r.pod, r.backend, r.refusal) for r in rows]
    assert {r.endpoint for r in rows} == {endpoint}
    assert all(not r.backend.startswith("decided") and not r.refusal for r in rows), [r.backend for r in rows]
    from tests.test_corpus import _container

    for r in rows:
        assert r.result is not None
        c = _container(r)
        env = preview.runtime_env(r.result.pod, c, configmaps)
        from app.core import wrap

        argv = shellread.kubelet_argv(wrap.original_argv(c), preview.kubelet_env(r.result.pod, c, configmaps))
        got = bash_argv(c, env, tmp_path, argv)
        assert got is not None
        from app.wrapper import rules

        full = rules.unpack({**env, rules.ENV_POD: wrap.settings_of(c) or ""})
        _, plan = rules.merge(got, full)
        assert plan.endpoint == r.endpoint or plan.endpoint.split(":")[0] == r.endpoint.split(":")[0]
        if plan.backend == "static":
            rank = rules.effective(rules.Argv(got), full, "--node-rank")[0]
            assert ("yes" if rank == "0" else "no") == r.store_host
        else:
            assert {"true": "yes", "false": "no"}[str(plan.is_host)] == r.store_host


def test_a_rendezvous_flag_that_needs_the_node_is_named() -> None:
    text = NEBIUS.replace("--rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT}", "--rdzv_endpoint=$(hostname -i):29500")
    rows = _rows(text)
    assert all(r.run_time.startswith("decided at run time (--rdzv-endpoint=$(hostname -i):29500") for r in rows), [
        r.run_time for r in rows
    ]
    # Only what the endpoint decides waits for run time: the backend and the node count are previewed.
    assert all(r.endpoint == "<run time>:29500" and r.store_host == "decided at run time" for r in rows)
    assert all(r.backend == "c10d" and r.nnodes == "2" for r in rows), [(r.backend, r.nnodes) for r in rows]


SCRIPT_IN_IMAGE = """
apiVersion: batch/v1
kind: Job
metadata: {name: img}
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    spec:
      hostNetwork: true
      subdomain: img
      restartPolicy: Never
      containers:
      - name: c
        image: x
        command: [bash, /workspace/torch_dist_launch.sh]
        resources: {limits: {nvidia.com/gpu: 8}}
        env: [{name: MASTER_ADDR, value: img-0.img}, {name: MASTER_PORT, value: "29500"}, {name: NNODES, value: "2"}]
"""


def test_a_script_of_the_image_is_named_not_no_torchrun() -> None:
    """An Indexed Job runs `bash /workspace/torch_dist_launch.sh` (c10d torchrun inside): the
    preview said "no torchrun and no MASTER_ADDR: no rendezvous of ours to preview", exit 0."""
    rows = _rows(SCRIPT_IN_IMAGE)
    for r in rows:
        assert "bash /workspace/torch_dist_launch.sh" in r.backend and "no torchrun" not in r.backend
        assert "known only at run time" in r.backend or "decided at run time" in r.backend
        assert "the wrapper catches torchrun inside it" in r.backend
        assert r.endpoint == "img-0.img:29500" and r.store_host == "decided at run time"
    cloned = SCRIPT_IN_IMAGE.replace(
        "command: [bash, /workspace/torch_dist_launch.sh]",
        'command: [sh, -c, "git clone https://example.com/r.git && cd r && python3 run.py"]',
    )
    assert all("python3 run.py" in r.backend for r in _rows(cloned))
    no_command = SCRIPT_IN_IMAGE.replace("command: [bash, /workspace/torch_dist_launch.sh]", "args: [x]")
    for r in _rows(no_command):
        assert "image's entrypoint" in r.backend and "cannot catch" in r.backend, r.backend


def test_volcanos_wait_for_master_init_container() -> None:
    """v1.15.1's pytorch plugin with --wait-master-enabled=true adds `wait-for-master` (busybox,
    the master's address and port, 300 s) to each worker, not to the master."""
    job = yaml.safe_load(NEBIUS)
    job["spec"]["plugins"]["pytorch"] += ["--wait-master-enabled=true", "--wait-master-timeout=60"]
    (ex,) = controllers.expand([job], "ml")
    master, worker = ex.pods
    assert "initContainers" not in master["spec"]
    (init,) = worker["spec"]["initContainers"]
    assert init["name"] == "wait-for-master" and init["image"] == "busybox:1.36.1"
    assert init["command"][:2] == ["sh", "-c"]
    script = init["command"][2]
    assert script.startswith('echo "Waiting for master node nb-master-0.nb:23456 to be ready..."\nTIMEOUT=60\n')
    assert "until { nc -z nb-master-0.nb 23456 || echo > /dev/tcp/nb-master-0.nb/23456; } 2>/dev/null; do" in script
    assert script.endswith('echo "Master node is ready!"')
    job["spec"]["plugins"]["pytorch"][-2] = "--wait-master-enabled=false"
    (ex,) = controllers.expand([job], "ml")
    assert all("initContainers" not in p["spec"] for p in ex.pods)


# ------------------------------------------------------------------------------ generated scripts
ENV = {"MASTER_ADDR": "j-master-0.j", "MASTER_PORT": "23456", "RANK": "1", "WORLD_SIZE": "2",
       "VC_WORKER_HOSTS": "j-worker-0.j,j-worker-1.j", "EMPTY": ""}  # fmt: skip
VALUES = ["$MASTER_ADDR", "${MASTER_PORT}", '"$RANK"', "'$RANK'", "${WORLD_SIZE:-4}", "${NOPE:-7}", "${NOPE-x}",
          "${EMPTY:-e}", "${EMPTY-e}", "${RANK:+r}", '"${MASTER_ADDR}:${MASTER_PORT}"', "$A", '"$A"', "${#A}",
          "${H[1]}", "${#H[@]}", "pre$RANK\\ post", '"a b"', "x\\$y", "$EMPTY", '"$EMPTY"', "${A}_$RANK"]  # fmt: skip
SETUP = ['A="one two"', "export A", "A=plain", 'IFS=, read -ra H <<< "$VC_WORKER_HOSTS"', "B=$MASTER_ADDR",
         "export C=${RANK}0", "unset A", "A='q r'", "X=1 Y=2"]  # fmt: skip


def _generated(seed: int) -> str:
    rnd = random.Random(seed)
    lines = rnd.sample(SETUP, rnd.randint(0, 4))
    flags = [f"--nnodes={rnd.choice(VALUES)}", f"--node-rank {rnd.choice(VALUES)}", "--role `hostname -s`:",
             f"--rdzv-id={rnd.choice(VALUES)}", f"--master-addr={rnd.choice(VALUES)}"]  # fmt: skip
    rnd.shuffle(flags)
    tail = " ".join(rnd.choice(VALUES) for _ in range(rnd.randint(0, 3)))
    cmd = "torchrun " + " ".join(flags[: rnd.randint(1, 5)]) + " train.py " + tail
    return "\n".join([*lines, rnd.choice(["", "set -e", "cd /tmp && true"]), cmd + rnd.choice(["", " 2>&1 | tee l"])])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_generated_scripts_read_as_bash_runs_them(tmp_path: Path) -> None:
    """200 scripts of assignments, exports, `read -ra`, quoting and parameter expansions: every
    word the preview knows is the word bash gives torchrun; a command substitution (read past)
    stands for exactly one word."""
    for seed in range(200):
        script = _generated(seed)
        reading = shellread.read_script(script, ENV)
        assert reading.torchrun is not None, script
        got = bash_argv({"command": ["bash", "-c", script]}, dict(ENV), tmp_path)
        assert got is not None, script
        want = reading.torchrun.args
        assert len(got) == len(want), (script, got, want)
        for g, w in zip(got, want, strict=True):
            assert shellread.is_unknown(w) or g == w, (script, got, want)
        assert any(shellread.is_unknown(w) for w in want) == ("hostname" in script.split("train.py")[0] and "--role" in
                                                               script.split("train.py")[0]), (script, want)  # fmt: skip


def test_the_shell_reading_is_bounded() -> None:
    script = "A=xxxxxxxxxxxxxxxx\n" + "".join('A="$A$A"\n' for _ in range(30)) + "torchrun --nnodes=$A t.py"
    with pytest.raises(shellread.TooLarge):
        shellread.read_script(script, {})


def test_explain_names_the_program_and_exits_0(tmp_path: Path) -> None:
    from tests.cliutil import run_cli

    f = tmp_path / "j.yaml"
    f.write_text(SCRIPT_IN_IMAGE)
    out = run_cli("explain", "-f", str(f), "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert all("torch_dist_launch.sh" in p["backend"] for p in json.loads(out.stdout)["pods"])
