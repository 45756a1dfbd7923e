"""Flags left from hand-written rendezvous shell, against the real torchrun on seed-like nodes
(each node's name resolves to 127.0.1.1 on itself and not at all on the other). Users moving to
the webhook are the ones most likely to keep `--local-addr=$(hostname)` and friends; on these
nodes each is the field report's ">10 minutes stuck" or "restarted after 2 minutes". Through
the wrapper every case ends one of two ways: the job completes with one store host (the flag was
replaced by the pod's DNS name, and the wrapper says so), or it refuses in seconds with its cause.

The command runs in `bash -c`, as in the field report, so the shell expands `$(hostname)`,
`$(hostname -i)` and `$HOSTNAME` on the node before the wrapper sees them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rendezvous.test_endpoint_forms import REFUSAL_BOUND, job, launch, place, pod_names, volcano, wait_refused
from tests.rendezvous.test_rendezvous import PORT, SCRIPT, assert_completed, report, wait_all, wrapper_line
from tests.rendezvous.testbed import Testbed

pytestmark = pytest.mark.rendezvous

# flag -> None (completes, the flag replaced where it does not work) or the nodes that refuse
# and the start of their cause.
CASES: dict[str, dict[int, str] | None] = {
    "--local-addr=$(hostname)": None,
    "--local-addr=$(hostname -i)": None,
    "--local-addr=$HOSTNAME": None,
    "--local-addr={node0_ip}": None,  # right on node 0 (kept), wrong on node 1 (replaced)
    "--rdzv-conf=is_host=true": {1: "is_host=true, but the rendezvous endpoint {pod0} names another pod of this job"},
    "--rdzv-conf=is_host=false": {0: "is_host=false, but the rendezvous endpoint {pod0} is this pod's own DNS name"},
}
LAUNCHERS = {"job": job, "volcano": volcano}


def command(flag: str, endpoint: str) -> list[str]:
    return ["bash", "-c", f"torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d "
                          f"--rdzv-endpoint={endpoint}:{PORT} {flag} {SCRIPT}"]  # fmt: skip


@pytest.mark.parametrize("flag", list(CASES))
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_leftover_flag_completes_or_refuses_in_seconds(
    bed: Testbed, tmp_path: Path, launcher: str, flag: str
) -> None:
    name = "lf"
    place(bed, launcher, name)
    pod0 = pod_names(launcher, name, 0)[0]
    written = flag.format(node0_ip=bed.nodes[0].address)
    runs = [launch(bed, n, LAUNCHERS[launcher](name, i, command(written, pod0)), tmp_path, {"VC_WORKER_NUM": "2"})
            for i, n in enumerate(bed.nodes)]  # fmt: skip
    refusers = CASES[flag]
    if refusers is None:
        report(f"{launcher} {flag}: completed", wait_all(runs))
        assert_completed(runs, world=2)
        lines = [wrapper_line(r) for r in runs]
        assert ["is_host=true" in ln for ln in lines] == [True, False], lines
        for i, r in enumerate(runs):
            # Node 0's own address works on node 0 (kept); everything else is this pod's DNS name.
            own = bed.nodes[0].address if "node0_ip" in flag and i == 0 else pod_names(launcher, name, i)[0]
            assert f"local_addr={own} " in wrapper_line(r), wrapper_line(r)
        replaced = [i for i, r in enumerate(runs) if f"replaced by {pod_names(launcher, name, i)[0]}" in r.output]
        assert replaced == ([1] if "node0_ip" in flag else [0, 1]), [r.output[-1500:] for r in runs]
        return
    elapsed = wait_refused(runs, refusers)
    report(f"{launcher} {flag}: refused", elapsed)
    assert elapsed < REFUSAL_BOUND, [r.output[-2000:] for r in runs]
    for i, cause in refusers.items():
        out = runs[i].output
        assert runs[i].proc.returncode == 1, out[-3000:]
        assert f"hostnet-rdma: error: {cause.format(pod0=pod0)}" in out, out[-3000:]


def test_a_pinned_local_addr_that_cannot_work_is_refused_in_seconds(bed: Testbed, tmp_path: Path) -> None:
    """The pod annotation hostnet-rdma.io/local-addr: keep: no replacing; both pods refuse."""
    name = "lk"
    place(bed, "job", name)
    pods = [job(name, i, command("--local-addr=$(hostname)", pod_names("job", name, 0)[0])) for i in range(2)]
    for p in pods:
        p["metadata"]["annotations"] = {"hostnet-rdma.io/local-addr": "keep"}
    runs = [launch(bed, n, p, tmp_path, {}) for n, p in zip(bed.nodes, pods, strict=True)]
    elapsed = wait_refused(runs, {0: "", 1: ""})
    report("job --local-addr=$(hostname), pinned: refused", elapsed)
    assert elapsed < REFUSAL_BOUND
    for i, r in enumerate(runs):
        assert r.proc.returncode == 1, r.output[-3000:]
        assert f"hostnet-rdma: error: --local-addr node-{i} is this node's host name" in r.output, r.output[-3000:]
