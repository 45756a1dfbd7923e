"""Prepare .device/ for scripts/device/blackhole.py on the GPU machine (which has python3, torch
and NCCL, but no network tools and no way out): the pods of two Volcano jobs exactly as the
webhook mutates them (the e2e job with NCCL, and the field report's own job running its own
train.py), their env resolved as the controller would, the Debian packages of iproute2 and
ethtool for the fabric (../shared/recipes/gpu-mtu-blackhole/), and the field report's train.py.

    python3 scripts/device/blackhole-kit.py ../shared   # then: device run with carry [".device"]
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.e2e import jobs  # noqa: E402

KIT = ROOT / ".device"
DEBS = ["iproute2", "ethtool", "libbpf1", "libelf1", "libmnl0", "libcap2", "libbsd0", "libmd0", "libtirpc3", "libdb5.3", "libzstd1", "zlib1g", "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0", "libkeyutils1", "libcom-err2"]  # fmt: skip

# The field report's Volcano job (seed 000), as its users write it once the webhook is there:
# plain torchrun, hostNetwork, NCCL at INFO; one GPU a node here.
SEED_JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: ddp-volcano, namespace: ml}
spec:
  minAvailable: 2
  schedulerName: volcano
  plugins: {env: [], svc: ["--publish-not-ready-addresses=true"]}
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        hostNetwork: true
        restartPolicy: OnFailure
        containers:
        - name: worker
          image: nvcr.io/nvidia/pytorch:26.09-py3
          command: ["torchrun", "--nproc-per-node=1", "/scripts/train.py"]
          env:
          - {name: NCCL_DEBUG, value: INFO}
          - {name: NCCL_DEBUG_SUBSYS, value: "INIT,NET"}
          resources: {limits: {nvidia.com/gpu: 1}}
"""


def mutated(manifests: str) -> list[dict[str, Any]]:
    p = subprocess.run([sys.executable, "-m", "app.cli", "mutate", "-f", "-", "-o", "json"], input=manifests,
                       capture_output=True, text=True, cwd=ROOT, check=True)  # fmt: skip
    out = json.loads(p.stdout)
    return list(out.get("items", [out]))


def runnable(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pod's command and env with Volcano's svc ConfigMap values filled in."""
    names = [f"{p['spec']['hostname']}.{p['spec']['subdomain']}" for p in pods]
    task = re.sub(r"-\d+$", "", pods[0]["spec"]["hostname"]).rsplit("-", 1)[1].upper()
    svc = {f"VC_{task}_HOSTS": ",".join(names), f"VC_{task}_NUM": str(len(pods))}
    out = []
    for p in pods:
        c = p["spec"]["containers"][0]
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "configMapKeyRef" in e.get("valueFrom", {}):
                env[e["name"]] = svc[e["valueFrom"]["configMapKeyRef"]["key"]]
        out.append({"name": p["metadata"]["name"], "dns": names[len(out)], "argv": c["command"] + c.get("args", []),
                    "env": env})  # fmt: skip
    return out


def main() -> None:
    shared = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared")
    KIT.mkdir(exist_ok=True)
    e2e = jobs.Params(namespace="ml", image="train", backend="nccl", gpus_per_node=1, sweep_bound=5)
    kit = {
        "e2e": runnable(mutated(yaml.safe_dump_all(jobs.manifests("volcano", e2e)))),
        "seed": runnable(mutated(SEED_JOB)),
    }
    (KIT / "pods.json").write_text(json.dumps(kit, indent=1))
    seed = (shared / "seeds").glob("000_*.txt")
    text = next(seed).read_text()
    script = text[
        text.index("import os\nimport socket\nimport time") : text.index('if __name__ == "__main__":\n    main()')
    ]
    (KIT / "seed_train.py").write_text(script + 'if __name__ == "__main__":\n    main()\n')
    shutil.copy(shared / "recipes" / "gpu-mtu-blackhole" / "fabric.sh", KIT / "fabric.sh")
    debs = KIT / "debs"
    if not any(debs.glob("iproute2_*.deb")):
        debs.mkdir(exist_ok=True)
        subprocess.run(["apt-get", "download", *DEBS], cwd=debs, check=True, capture_output=True)
    print(f"kit in {KIT}: {', '.join(sorted(x.name for x in KIT.iterdir()))}")


if __name__ == "__main__":
    main()
