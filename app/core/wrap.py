"""Put the torchrun wrapper in front of a training container's command.

The container's original command runs behind a small sh bootstrap that writes the wrapper
into an injected emptyDir and puts it first on PATH, so `torchrun` is caught wherever it is
called: the argv itself, inside `bash -c`, or in a user script. Containers whose command is
unknown at admission (none given: the image entrypoint runs) and `python -m
torch.distributed.run` get torchrun's own PET_* env instead, with a warning.
"""

from __future__ import annotations

import re
from typing import Any

from app.core import names
from app.core.inject import Context, Outcome
from app.core.podspec import Env, add_mount, add_volume, child
from app.wrapper.torchrun import is_own_endpoint

Obj = dict[str, Any]

# The bootstrap. $1 is the wrapper payload, the rest is the original argv. It must run on
# any image with sh + python3 and a read-only root filesystem: it writes only to BIN_DIR.
# Without python3 it runs the original command unwrapped rather than failing the pod.
# Kubernetes rewrites `$(NAME)` and `$$` in command/args, so neither appears below.
_INSTALL = """import base64, os, sys, zlib
d, payload, python = sys.argv[1:4]
script = os.path.join(d, "hostnet_rdma_torchrun.py")
shim = "#!/bin/sh\\nexec \\"%s\\" \\"%s\\" \\"$@\\"\\n" % (python, script)
for name, data, mode in ((script, zlib.decompress(base64.b64decode(payload)), 0o644),
                         (os.path.join(d, "torchrun"), shim.encode(), 0o755)):
    tmp = "%s.%d" % (name, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, name)
"""
BOOTSTRAP = (
    "d=${HOSTNET_RDMA_BIN_DIR:-" + names.BIN_DIR + "}\n"
    'w="$1"; shift\n'
    'p="`command -v python3 || command -v python`"\n'
    'if [ -n "$p" ] && "$p" -c \'' + _INSTALL + '\' "$d" "$w" "$p"; then\n'
    '  PATH="$d:$PATH"; export PATH\n'
    "else\n"
    '  echo "hostnet-rdma: could not install the torchrun wrapper (no python3?); running without it" >&2\n'
    "fi\n"
    'exec "$@"\n'
)

_TORCHRUN = re.compile(r"(^|[\s/;&|(`\"'])torchrun($|[\s;&|)`\"'])")
_MODULE_RUN = re.compile(r"torch\.distributed\.(run|launch)\b")


def is_wrapped(container: Obj) -> bool:
    cmd = container.get("command")
    return isinstance(cmd, list) and len(cmd) >= 5 and cmd[:2] == ["/bin/sh", "-c"] and cmd[3] == names.BOOTSTRAP_ARGV0


def original_argv(container: Obj) -> list[str]:
    cmd = container.get("command") or []
    if is_wrapped(container):
        cmd = cmd[5:]
    return [str(x) for x in cmd] + [str(x) for x in container.get("args") or []]


def runs_torch_distributed(container: Obj) -> bool:
    """The container's command starts torchrun or `python -m torch.distributed.run/launch`."""
    argv = " ".join(original_argv(container))
    return bool(_TORCHRUN.search(argv) or _MODULE_RUN.search(argv))


def _static(value: str) -> bool:
    return bool(value) and "${" not in value


def _pet_fallback(env: Env, ctx: Context, identities: tuple[str, ...]) -> None:
    info = ctx.info
    env.set_default("PET_LOCAL_ADDR", info.advertised_address)
    if _static(info.rdzv_id):
        env.set_default("PET_RDZV_ID", info.rdzv_id)
    endpoint_env = env.get("PET_RDZV_ENDPOINT")
    endpoint = str(endpoint_env.get("value") or "") if endpoint_env else info.rdzv_endpoint
    backend_env = env.get("PET_RDZV_BACKEND")
    backend = str(backend_env.get("value") or "") if backend_env else info.rdzv_backend
    if backend == "c10d" and _static(endpoint):
        is_host = "true" if is_own_endpoint(endpoint, identities) else "false"
        env.set_default("PET_RDZV_CONF", f"is_host={is_host}")


def wrap(pod: Obj, ctx: Context) -> Outcome:
    if not ctx.flag(names.ANN_WRAP, ctx.params.config.wrap):
        return "turned off"
    info = ctx.info
    if not info.advertised_address:
        ctx.warn(
            f"launcher {info.launcher}: no stable DNS name for this pod (set spec.hostname and "
            "spec.subdomain with a headless Service); torchrun is not wrapped"
        )
        return "no stable DNS name for this pod"
    if not ctx.params.wrapper_payload:
        return "no wrapper payload configured"
    cfg = ctx.params.config
    identities = info.identities(ctx.params.namespace, cfg.cluster_domain)
    owned = {
        names.ENV_LAUNCHER: info.launcher,
        names.ENV_LOCAL_ADDR: info.advertised_address,
        names.ENV_IDENTITIES: ",".join(identities),
        names.ENV_RDZV_ID: info.rdzv_id,
        names.ENV_RDZV_BACKEND: info.rdzv_backend,
        names.ENV_RDZV_ENDPOINT: info.rdzv_endpoint,
        names.ENV_NNODES: info.nnodes,
        names.ENV_GLOO_IFNAME: "1" if ctx.flag(names.ANN_GLOO_IFNAME, cfg.gloo_socket_ifname) else "0",
        names.ENV_NCCL_IFNAME: "1" if ctx.flag(names.ANN_NCCL_IFNAME, cfg.nccl_socket_ifname) else "0",
        names.ENV_DNS_TIMEOUT: str(cfg.dns_timeout_seconds),
        names.ENV_MIN_TORCH: cfg.min_torch,
    }
    containers = child(pod, "spec").get("containers") or []
    wrapped_any = False
    for index in ctx.training:
        c = containers[index]
        env = Env(c)
        for key, value in owned.items():
            if value:
                env.set_owned(key, value)
        argv = original_argv(c)
        cname = c.get("name")
        if not c.get("command") and not is_wrapped(c):
            ctx.warn(
                f"{cname}: no command (image entrypoint unknown at admission); torchrun settings passed as PET_* env"
            )
            _pet_fallback(env, ctx, identities)
            continue
        if _MODULE_RUN.search(" ".join(argv)):
            ctx.warn(
                f"{cname}: python -m torch.distributed.run bypasses the wrapper; torchrun settings passed as PET_* env"
            )
            _pet_fallback(env, ctx, identities)
        rest = c["command"][5:] if is_wrapped(c) else list(c["command"])
        c["command"] = ["/bin/sh", "-c", BOOTSTRAP, names.BOOTSTRAP_ARGV0, ctx.params.wrapper_payload, *rest]
        add_mount(c, names.VOL_BIN, names.BIN_DIR)
        wrapped_any = True
    if wrapped_any:
        add_volume(child(pod, "spec"), {"name": names.VOL_BIN, "emptyDir": {"sizeLimit": "16Mi"}})
    return None
