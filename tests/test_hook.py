"""torchrun is caught however it is started: the real bootstrap installs the wrapper files
(inline delivery) or finds them where the init container's `python3 -m app.wrapper.install`
put them (initContainer delivery), then each launch form runs (dry run: the wrapper prints
the argv torchrun would get). Every test runs with both deliveries.

Fake `torchrun` scripts and a fake `torch.distributed.run` module stand in for torch here
(the rendezvous tier runs the same forms with real torch across two nodes)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.core import names
from app.core.wrap import BOOTSTRAP, BOOTSTRAP_PATH
from app.wrapper import payload, rules
from app.wrapper.rules import BOOTSTRAP_FILE

ENV = {
    "HOSTNET_RDMA_LAUNCHER": "job",
    "HOSTNET_RDMA_LOCAL_ADDR": "ij-1.ij",
    "HOSTNET_RDMA_IDENTITIES": "ij-1,ij-1.ij,ij-1.ij.ns",
    "HOSTNET_RDMA_PEERS": "ij-*",
    "HOSTNET_RDMA_RDZV_ID": "uid-1",
    "HOSTNET_RDMA_DRY_RUN": "1",
}
WANT = ["--rdzv-id=uid-1", "--local-addr=ij-1.ij", "--rdzv-conf=is_host=false"]
TORCHRUN_ARGS = "--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=ij-0.ij:29400 t.py"

FAKE_TORCHRUN = """#!{python}
import json, sys
print("REAL-TORCHRUN " + json.dumps(sys.argv[1:]))
"""


def init_container_command(image_dir: str, bin_dir: str) -> list[str]:
    """The init container's command as the core writes it, with this sandbox's paths."""
    from app import config
    from app.core import Params, mutate

    cfg = config.from_dict({"wrapper": {"image": "registry.example/hostnet-rdma:test"}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"hostNetwork": True, "hostname": "p", "subdomain": "s",
                    "containers": [{"name": "c", "image": "x", "command": ["torchrun", "t.py"]}]}}  # fmt: skip
    (init,) = mutate(pod, Params(config=cfg, namespace="ns")).pod["spec"]["initContainers"]
    swap = {names.IMAGE_WRAPPER_DIR: image_dir, names.BIN_DIR: bin_dir}
    return [next((arg.replace(k, v) for k, v in swap.items() if arg.startswith(k)), arg) for arg in init["command"]]


@pytest.fixture(params=["inline", "initContainer"])
def sandbox(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Path]:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    script = venv / "torchrun"
    script.write_text(FAKE_TORCHRUN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    (venv / "activate").write_text(f'PATH="{venv}:$PATH"; export PATH\n')
    fake_torch = tmp_path / "fake-torch" / "torch" / "distributed"
    fake_torch.mkdir(parents=True)
    (fake_torch.parent / "__init__.py").write_text("")
    (fake_torch / "__init__.py").write_text("")
    (fake_torch / "run.py").write_text("import json, sys\nprint('REAL-MODULE ' + json.dumps(sys.argv[1:]))\n")
    image_site = tmp_path / "image-site"
    image_site.mkdir()
    (image_site / "sitecustomize.py").write_text("import sys\nsys.stderr.write('IMAGE-SITECUSTOMIZE\\n')\n")
    bin_dir = tmp_path / "bin"
    if request.param == "initContainer":
        # The image build lays the files out (deploy/Dockerfile), the init container copies them.
        image_dir = tmp_path / "image" / "opt-hostnet-rdma-wrapper"
        subprocess.run([sys.executable, "-m", "app.wrapper.install", str(image_dir)], check=True, capture_output=True)
        bin_dir.mkdir()
        command = init_container_command(str(image_dir), str(bin_dir))
        subprocess.run(command, check=True, capture_output=True)
    return {"venv": venv, "torch": fake_torch.parent.parent, "image_site": image_site, "bin": bin_dir,
            "delivery": Path(request.param)}  # fmt: skip


def run(sandbox: dict[str, Path], command: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    """The mutated container's command: bootstrap, then the user's command."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": "/root",
        names.ENV_PREFIX + "BIN_DIR": str(sandbox["bin"]),
        "PYTHONPATH": f"{sandbox['torch']}:{sandbox['image_site']}",
        **ENV,
        **extra,
    }
    # The webhook's settings travel as the bootstrap's first argument, as in a mutated pod.
    settings = rules.pack({k: env.pop(k) for k in rules.PACKED if k in env})
    if str(sandbox["delivery"]) == "initContainer":
        argv = [str(sandbox["bin"] / BOOTSTRAP_FILE), settings, *command]  # BOOTSTRAP_PATH in this sandbox
    else:
        argv = ["/bin/sh", "-c", BOOTSTRAP, names.BOOTSTRAP_ARGV0, payload(), settings, *command]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def decided(p: subprocess.CompletedProcess[str]) -> list[str]:
    lines = [line for line in p.stdout.splitlines() if line.startswith("[")]
    assert lines, f"no dry-run argv:\nstdout={p.stdout}\nstderr={p.stderr}"
    argv: list[str] = json.loads(lines[-1])
    return argv


@pytest.mark.parametrize(
    ("form", "command"),
    [
        ("PATH shim in bash -c", ["bash", "-c", "torchrun {args}"]),
        ("absolute path", ["{venv}/torchrun", *TORCHRUN_ARGS.split()]),
        ("activated venv", ["bash", "-c", ". {venv}/activate && torchrun {args}"]),
        ("login shell (PATH reset)", ["bash", "-lc", ". {venv}/activate && torchrun {args}"]),
        ("python -m torch.distributed.run", ["bash", "-c", "python3 -m torch.distributed.run {args}"]),
        ("user script", ["bash", "-c", "printf '#!/bin/sh\\n{venv}/torchrun \"$@\"\\n' > /tmp/hr-$$.sh; "
                                       "sh /tmp/hr-$$.sh {args}; rm -f /tmp/hr-$$.sh"]),
    ],
)  # fmt: skip
def test_every_launch_form_is_caught(sandbox: dict[str, Path], form: str, command: list[str]) -> None:
    cmd = [c.format(venv=sandbox["venv"], args=TORCHRUN_ARGS) for c in command]
    p = run(sandbox, cmd)
    assert p.returncode == 0, p.stderr
    argv = decided(p)
    assert argv[0] == "torchrun"
    for want in WANT:
        assert want in argv, (form, argv)
    assert "hostnet-rdma: launcher=job backend=c10d is_host=false local_addr=ij-1.ij" in p.stderr, p.stderr
    assert "REAL-" not in p.stdout  # dry run: nothing ran


def test_hook_rewrites_argv_in_place_for_the_real_torchrun(sandbox: dict[str, Path]) -> None:
    """Without dry run the hook hands torchrun its new argv (no exec, same process)."""
    p = run(sandbox, [str(sandbox["venv"] / "torchrun"), "--rdzv-backend=static", "t.py"], HOSTNET_RDMA_DRY_RUN="")
    assert p.returncode == 0, p.stderr
    assert "REAL-TORCHRUN " in p.stdout
    assert json.loads(p.stdout.split("REAL-TORCHRUN ", 1)[1]) == ["--rdzv-backend=static", "t.py"]
    assert "backend=static" in p.stderr


def test_shim_execs_the_real_torchrun_once(sandbox: dict[str, Path]) -> None:
    """Through the PATH shim without dry run: the real torchrun (later on PATH) runs, once, with
    the new argv, and the hook in it does not handle it a second time."""
    p = run(sandbox, ["bash", "-c", f". {sandbox['venv']}/activate; PATH={sandbox['bin']}:$PATH; "
                                    "torchrun --rdzv-backend=static t.py"], HOSTNET_RDMA_DRY_RUN="")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("REAL-TORCHRUN ") == 1, p.stdout
    assert p.stderr.count("hostnet-rdma: launcher=") == 1, p.stderr


def test_shim_and_hook_handle_torchrun_once(sandbox: dict[str, Path]) -> None:
    p = run(sandbox, ["bash", "-c", f"torchrun {TORCHRUN_ARGS}"])
    assert p.stderr.count("hostnet-rdma: launcher=") == 1, p.stderr


def test_image_sitecustomize_still_loads_and_other_processes_are_untouched(sandbox: dict[str, Path]) -> None:
    p = run(sandbox, ["python3", "-c", "print('plain')"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "plain"
    assert "IMAGE-SITECUSTOMIZE" in p.stderr
    assert "hostnet-rdma" not in p.stderr


def test_broken_image_sitecustomize_is_reported_not_fatal(sandbox: dict[str, Path]) -> None:
    (sandbox["image_site"] / "sitecustomize.py").write_text("raise RuntimeError('boom')\n")
    p = run(sandbox, ["python3", "-c", "print('still runs')"])
    assert p.stdout.strip() == "still runs"
    assert "the image's sitecustomize failed: RuntimeError: boom" in p.stderr


def test_hook_costs_little_outside_torchrun(sandbox: dict[str, Path]) -> None:
    """Every Python process in the container imports the hook: it must not import the wrapper."""
    p = run(sandbox, ["python3", "-c", "import sys; print('hostnet_rdma_torchrun' in sys.modules)"])
    assert p.stdout.strip() == "False", p.stderr


def test_user_pythonpath_is_kept_after_ours(sandbox: dict[str, Path]) -> None:
    p = run(sandbox, ["python3", "-c", "import os; print(os.environ['PYTHONPATH'])"])
    parts = p.stdout.strip().split(os.pathsep)
    assert parts[0] == str(sandbox["bin"] / "py")
    assert parts[1:] == [str(sandbox["torch"]), str(sandbox["image_site"])]


def test_installed_bootstrap_without_python_runs_unwrapped_and_says_so(tmp_path: Path) -> None:
    """An image with no python cannot run the wrapper: the command still runs, with a line
    saying torchrun is not wrapped, instead of a pod that fails to start."""
    from app.wrapper import install

    install.install(tmp_path / "bin")
    (tmp_path / "empty").mkdir()
    p = subprocess.run([str(tmp_path / "bin" / BOOTSTRAP_FILE), "launcher=job", "/bin/echo", "ran"], env={"PATH": str(tmp_path / "empty")},
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert p.returncode == 0 and p.stdout.strip() == "ran"
    assert "no python3 in this image; torchrun runs without the wrapper" in p.stderr


def test_installed_bootstrap_exports_the_settings_and_runs_an_older_spec_whole(tmp_path: Path) -> None:
    """Its first argument is the settings, exported for the wrapper; a pod spec from a version
    that passed none (a mutable image tag) starts with the command itself, run whole."""
    from app.wrapper import install

    install.install(tmp_path / "bin")
    boot = str(tmp_path / "bin" / BOOTSTRAP_FILE)
    show = ["/bin/sh", "-c", 'echo "[$HOSTNET_RDMA_POD]" "$@"', "sh", "ran"]
    for argv, want in (
        ([boot, "launcher=job;local_addr=a-0.a", *show], "[launcher=job;local_addr=a-0.a] ran"),
        ([boot, "", *show], "[] ran"),
        ([boot, *show], "[] ran"),  # no settings: /bin/sh is the command, not a setting
    ):
        p = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and p.stdout.strip() == want, (argv, p.stdout, p.stderr)


def test_the_core_starts_the_command_with_the_file_the_init_container_copies(tmp_path: Path) -> None:
    from app import config
    from app.core import Params, mutate
    from app.wrapper import install

    cfg = config.from_dict({"wrapper": {"image": "registry.example/hostnet-rdma:test"}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"hostNetwork": True, "hostname": "p", "subdomain": "s",
                    "containers": [{"name": "c", "image": "x", "command": ["torchrun", "t.py"]}]}}  # fmt: skip
    out = mutate(pod, Params(config=cfg, namespace="ns")).pod["spec"]
    assert out["containers"][0]["command"] == [BOOTSTRAP_PATH, "launcher=pod;local_addr=p.s;peers=", "torchrun", "t.py"]
    # ... a file the init container's copy puts there, executable.
    install.install(tmp_path / "image")
    (tmp_path / "bin").mkdir()
    subprocess.run(init_container_command(str(tmp_path / "image"), str(tmp_path / "bin")), check=True)
    assert os.access(tmp_path / "bin" / BOOTSTRAP_PATH.rsplit("/", 1)[1], os.X_OK)


def test_install_writes_the_files_atomically_and_reports_failure(tmp_path: Path) -> None:
    from app.wrapper import FILES, install

    written = install.install(tmp_path / "bin")
    assert sorted(p.name for p in written) == sorted([*FILES, "torchrun", BOOTSTRAP_FILE])
    assert os.access(tmp_path / "bin" / BOOTSTRAP_FILE, os.X_OK)
    assert os.access(tmp_path / "bin" / "torchrun", os.X_OK)
    assert not [p for p in (tmp_path / "bin").rglob("*.*[0-9]")], "temporary files left behind"
    for name, source in FILES.items():
        assert (tmp_path / "bin" / "py" / name).read_text() == source.read_text()
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, "-m", "app.wrapper.install", str(blocker / "bin")],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert p.returncode == 1
    assert f"cannot install the torchrun wrapper into {blocker / 'bin'}" in p.stderr
