"""Put the torchrun wrapper in front of a training container's command.

The container's original command runs behind a small sh bootstrap that puts the `torchrun`
shim first on PATH and the start-up hook (sitecustomize) first on PYTHONPATH. The wrapper's
files (the bootstrap among them) are at /hostnet-rdma: mounted from the webhook's image
(wrapper.delivery: imageVolume), copied from it into an emptyDir by an init container
(initContainer), or written into an emptyDir by a bootstrap carried in the pod spec (inline).
So torchrun is caught however it starts: the argv itself,
`bash -c`, a user script, an absolute path, an activated venv, a login shell, or
`python -m torch.distributed.run`. A container with no `command` runs its image entrypoint,
unknown at admission: it gets the complete PET_* env the launcher implies instead (torchrun
reads it itself), with a warning. The decision is app.wrapper.rules, shared with the wrapper.
"""

from __future__ import annotations

import re
from typing import Any

from app.core import budget, names, reasons, shwords
from app.core.inject import Context, StepOutcome
from app.core.launchers.base import env_names
from app.core.params import InjectConfig
from app.core.podspec import Env, add_mount, add_volume, child, child_list, find_named
from app.wrapper import rules

Obj = dict[str, Any]

# The bootstrap. $1 is the wrapper payload, $2 the settings, the rest is the original argv. It
# must run on any image with sh + python3 and a read-only root filesystem: it writes only to BIN_DIR.
# Without python3 it runs the original command unwrapped rather than failing the pod.
# Kubernetes rewrites `$(NAME)` and `$$` in command/args, so neither appears below.
_INSTALL = """import base64, json, os, sys, zlib
d, payload, python = sys.argv[1:4]
py = os.path.join(d, "py")
os.makedirs(py, exist_ok=True)
files = [(os.path.join(py, n), t.encode(), 0o644)
         for n, t in json.loads(zlib.decompress(base64.b64decode(payload))).items()]
shim = "#!/bin/sh\\nexec \\"%s\\" \\"%s\\" \\"$@\\"\\n" % (python, os.path.join(py, "hostnet_rdma_torchrun.py"))
files.append((os.path.join(d, "torchrun"), shim.encode(), 0o755))
for name, data, mode in files:
    tmp = "%s.%d" % (name, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, name)
"""
BOOTSTRAP = (
    "d=${" + rules.ENV_BIN_DIR + ":-" + names.BIN_DIR + "}\n"
    'w="$1"; ' + rules.ENV_POD + '="$2"; export ' + rules.ENV_POD + "; shift 2\n"
    'p="`command -v python3 || command -v python`"\n'
    'if [ -n "$p" ] && "$p" -c \'' + _INSTALL + '\' "$d" "$w" "$p"; then\n'
    '  PATH="$d:$PATH"; PYTHONPATH="$d/py${PYTHONPATH:+:$PYTHONPATH}"; export PATH PYTHONPATH\n'
    "else\n"
    '  echo "hostnet-rdma: could not install the torchrun wrapper (no python3?); running without it" >&2\n'
    "fi\n"
    'exec "$@"\n'
)

# The emptyDir the wrapper's files go to (initContainer, inline): four small files.
BIN_EMPTY_DIR = {"sizeLimit": "16Mi"}
# The init container's command (initContainer delivery): how a second pass knows it is ours.
INIT_COMMAND = ["cp", "-R", names.IMAGE_WRAPPER_DIR + "/.", names.BIN_DIR]

# With the files from the image (imageVolume, initContainer) the bootstrap is in BIN_DIR
# before the container starts: its command is this path, the settings, then the original argv.
BOOTSTRAP_PATH = names.BIN_DIR + "/" + rules.BOOTSTRAP_FILE

# The characters that may stand before and after the word `torchrun` in a command.
_BEFORE = frozenset(" \t\r\n/;&|(`\"'")
_AFTER = frozenset(" \t\r\n;&|)`\"'")
_MODULE_RUN = re.compile(r"torch\.distributed\.(run|launch)\b")
# Scripts (`sh -c SCRIPT`) and commands longer than this are not split or parsed at admission
# (budget.ANALYSED_COMMAND_BYTES). Such a container is handled as one whose torchrun arguments
# are not in its command (a user script): the wrapper still decides at run time; admission only
# cannot warn about them.
MAX_ANALYSED_SCRIPT = budget.ANALYSED_COMMAND_BYTES


def _parts(cmd: Any) -> tuple[str | None, list[Any]] | None:
    """A wrapped command's settings and original command (either delivery); None when the
    command is not wrapped. A command wrapped by a version that passed no settings (re-submitted
    from `kubectl get`) has none: its original command follows the bootstrap directly."""
    if not isinstance(cmd, list) or not cmd:
        return None
    if cmd[0] == BOOTSTRAP_PATH:
        start = 1
    elif len(cmd) >= 5 and cmd[:2] == ["/bin/sh", "-c"] and cmd[3] == names.BOOTSTRAP_ARGV0:
        start = 5
    else:
        return None
    if start < len(cmd) and isinstance(cmd[start], str) and rules.is_packed(cmd[start]):
        return cmd[start], cmd[start + 1 :]
    return None, cmd[start:]


def _unwrapped(cmd: Any) -> list[Any] | None:
    """The original command of a wrapped one (either delivery), None when it is not wrapped."""
    parts = _parts(cmd)
    return None if parts is None else parts[1]


def settings_of(container: Obj) -> str | None:
    """The settings a wrapped container's bootstrap exports as HOSTNET_RDMA_POD, else None."""
    parts = _parts(container.get("command"))
    return None if parts is None else parts[0]


def is_wrapped(container: Obj) -> bool:
    return _unwrapped(container.get("command")) is not None


def original_argv(container: Obj) -> list[str]:
    cmd = container.get("command") or []
    rest = _unwrapped(cmd)
    cmd = cmd if rest is None else rest
    return [str(x) for x in cmd] + [str(x) for x in container.get("args") or []]


def runs_torch_distributed(container: Obj) -> bool:
    """The container's command starts torchrun or `python -m torch.distributed.run/launch`.
    By substring search (C speed whatever the size), not a regex scanned at every position."""
    argv = " ".join(original_argv(container))
    at = argv.find("torchrun")
    while at >= 0:
        end = at + len("torchrun")
        if (at == 0 or argv[at - 1] in _BEFORE) and (end == len(argv) or argv[end] in _AFTER):
            return True
        at = argv.find("torchrun", end)
    return "torch.distributed." in argv and _MODULE_RUN.search(argv) is not None


_SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh")
_SHELL_OPERATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", shwords.NEWLINE}
_DOLLAR_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ScriptTooLarge(ValueError):
    """A `sh -c` script over MAX_ANALYSED_SCRIPT: not split at admission."""


def _tokens(argv: list[str]) -> list[str]:
    """The container's command as words, a `sh -c STRING` split as the shell would (best effort)."""
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1].startswith("-") and "c" in argv[1]:
        if len(argv[2]) > MAX_ANALYSED_SCRIPT:
            raise ScriptTooLarge(
                f"its script is {len(argv[2])} bytes, over the {MAX_ANALYSED_SCRIPT} analysed at admission"
            )
        return shwords.split(argv[2])
    size = sum(len(word) + 1 for word in argv)
    if size > MAX_ANALYSED_SCRIPT:
        raise ScriptTooLarge(f"its command is {size} bytes, over the {MAX_ANALYSED_SCRIPT} analysed at admission")
    return argv


class Command:
    """A container's command read once at admission (the checks of wrap() each read it): its
    words as the shell will pass them, and torchrun's arguments among them."""

    def __init__(self, container: Obj) -> None:
        self.argv = original_argv(container)
        self.size = sum(len(word) + 1 for word in self.argv)
        self.too_large = ""  # why it was not split, when it is over MAX_ANALYSED_SCRIPT
        self.words: list[str] | None = None  # None: not split (too large, or unbalanced quotes)
        try:
            self.words = _tokens(self.argv)
        except ScriptTooLarge as e:
            self.too_large = str(e)
        except ValueError:  # unbalanced quotes: the shell will complain, not us
            pass
        self._start = None if self.words is None else _torchrun_start(self.words)
        self.torchrun = None if self.words is None else _torchrun_after(self.words, self._start)

    def sets_env(self) -> bool:
        """The script sets or unsets torchrun's PET_* env (or the wrapper's) before it runs
        torchrun (`PET_NNODES=2 torchrun`, `export PET_...`): what the rules decide from them is
        known only when the script runs. Asked only where a decision would refuse the pod."""
        if self.words is None or self._start is None:
            return False
        return any(_SETS_ENV.match(w) for w in self.words[: self._start])


_SETS_ENV = re.compile(r"(PET_|HOSTNET_RDMA_)[A-Z0-9_]*(=|$)")


def torchrun_args(container: Obj) -> list[str] | None:
    """torchrun's own arguments as far as admission can read them (None if not found)."""
    command = Command(container)
    if command.too_large:
        raise ScriptTooLarge(command.too_large)
    return command.torchrun


def _torchrun_start(words: list[str]) -> int | None:
    """The index of torchrun's first argument among the words (None: no torchrun)."""
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == "torchrun":
            return i + 1
        if (
            word == "-m"
            and i + 1 < len(words)
            and words[i + 1] in ("torch.distributed.run", "torch.distributed.launch")
        ):
            return i + 2
    return None


def _torchrun_after(words: list[str], start: int | None) -> list[str] | None:
    if start is None:
        return None
    rest = words[start:]
    end = next((j for j, w in enumerate(rest) if w in _SHELL_OPERATORS), len(rest))
    return rest[:end]


_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _literal_env(c: Obj) -> dict[str, str]:
    """The container's env as far as it is known at admission. A value that refers to another
    variable, `$(VAR)`, is known only if VAR is (the kubelet expands it at run time); otherwise
    it is left out, so a PET_* value written by an earlier pass with such a reference reads as
    unknown again, as on the first pass (reinvocation must not decide what the first could not)."""
    env = {
        str(e["name"]): str(e["value"])
        for e in c.get("env") or []
        if isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str)
    }
    if "$(" not in "".join(env.values()):
        return env
    known: dict[str, str] = {}
    # What the expansion may make in all (budget.ENV_EXPANDED_BYTES; literal values are the
    # body's own bytes): each value is sized before it is built, so a chain that doubles at each entry stops at the bound, unknown.
    room = budget.ENV_EXPANDED_BYTES
    for name, value in env.items():  # in order: $(VAR) sees only the variables before it
        if "$(" in value:
            refs = _K8S_REF.findall(value)
            if not all(r in known for r in refs):
                continue
            size = len(value) + sum(len(known[r]) - len(r) - 3 for r in refs)
            if size > room:
                continue
            value = _K8S_REF.sub(lambda m: known[m.group(1)], value)
            room -= len(value)
        known[name] = value
    return known


def _declared(c: Obj) -> set[str]:
    return {str(e["name"]) for e in c.get("env") or [] if isinstance(e, dict) and isinstance(e.get("name"), str)}


def _endpoint_check(c: Obj, command: Command, ctx: Context, owned: dict[str, str]) -> None:
    """Warn at admission, as the wrapper will say at run time, about an endpoint nobody can
    host, and about what will make the wrapper refuse to start (when torchrun's arguments are
    in the command: in a script they are known only at run time)."""
    args = command.torchrun
    if command.too_large:
        ctx.warn(
            reasons.GENERAL,
            f"{c.get('name')}: {command.too_large}: its torchrun arguments are checked by the wrapper at run time only",
        )
    _leftover_flags(c, command, ctx, owned)
    env = {**_literal_env(c), **owned}
    try:
        _, plan = rules.merge(["<script>"] if args is None else args, env)
    except rules.ArgvError:
        return
    if plan.endpoint_problem and "$" not in plan.endpoint:
        ctx.warn(reasons.ENDPOINT_NAMES_NO_POD, f"{c.get('name')}: {plan.endpoint_problem}")
    if plan.fatal and args is not None and not command.sets_env():
        ctx.problem(
            reasons.of_refusal(plan.fatal_kind), f"{c.get('name')}: wrapper will refuse: {plan.fatal}", plan.fatal
        )


def _flag_value(words: list[str], names_: tuple[str, ...]) -> str | None:
    """The value of the first of these flags in the words (`--flag=v`, `--flag v`, or a word that
    ends with the flag, as in `"--local-addr=$(hostname)"` inside quotes), else None."""
    for i, word in enumerate(words):
        for flag in names_:
            at = word.find(flag)
            if at < 0:
                continue
            rest = word[at + len(flag) :]
            if rest.startswith("="):
                return rest[1:]
            if not rest and i + 1 < len(words):
                return words[i + 1]
    return None


def _sets_is_host(words: list[str]) -> bool:
    """Whether an --rdzv-conf in the command carries is_host. Word by word, each read once: a
    pattern over the text (`--rdzv-conf`, `=` or spaces, non-spaces, is_host) backtracked over
    every `--rdzv-conf=` of a word that repeats it (0.3 s per 64 KiB)."""
    conf = _flag_value(words, ("--rdzv-conf", "--rdzv_conf"))
    return conf is not None and "is_host" in conf


def _leftover_flags(c: Obj, command: Command, ctx: Context, owned: dict[str, str]) -> None:
    """Flags left from hand-written rendezvous shell, which the webhook now sets: say so at
    admission (and in the Event); the wrapper checks them at start. Read from the words the shell
    will pass (a script split as bash does: `$(...)` whole, line continuations joined), bounded in
    size; from the text's blank-separated words where the script does not split."""
    if command.size > MAX_ANALYSED_SCRIPT:
        return
    # Unbalanced quotes: the shell will refuse the script; still say what is there.
    words = command.words if command.words is not None else " ".join(command.argv).split()
    own = owned.get(names.ENV_LOCAL_ADDR, "")
    local = _flag_value(words, ("--local-addr", "--local_addr"))
    # The pod's names only where a flag is there to compare (most commands set none).
    if (
        local is not None
        and own
        and local.lower().rstrip(".") not in rules.expand_identities(owned.get(names.ENV_IDENTITIES, "") or own)
    ):
        ctx.warn(
            reasons.LEFTOVER_FLAG,
            f"{c.get('name')}: the command sets --local-addr={local} itself (rendezvous shell the webhook replaces): "
            f"at start the wrapper keeps it only where the other nodes can reach this one at it, and otherwise uses "
            f"{own} (annotate {names.ANN_LOCAL_ADDR}: keep to refuse instead); remove it",
        )
    if own and _sets_is_host(words):
        ctx.warn(
            reasons.LEFTOVER_FLAG,
            f"{c.get('name')}: the command sets is_host itself in --rdzv-conf: the wrapper refuses in seconds where it "
            "cannot work (true on a pod the endpoint does not name, false on the one it names); leave it out, the "
            "webhook sets it on each pod",
        )


def _pet_fallback(c: Obj, env: Env, ctx: Context, owned: dict[str, str]) -> None:
    """For a container whose torchrun nothing can intercept: PET_* env for everything the
    wrapper would have added, so torchrun reaches the same decision by itself."""
    pets, plan = rules.pet_fallback(None, {**_literal_env(c), **owned})
    declared = _declared(c)
    cannot: list[str] = []
    for option, template in plan.unexpanded.items():
        # A value known only at run time: Kubernetes expands $(VAR) from env declared before it.
        wanted = _DOLLAR_VAR.findall(template)
        if "+" not in template and wanted and all(v in declared for v in wanted):
            pets[rules.pet_name(option)] = _DOLLAR_VAR.sub(r"$(\1)", template)
        else:
            cannot.append(option)
    if plan.backend == "c10d" and plan.is_host is None and "--rdzv-endpoint" in plan.unexpanded:
        cannot.append("is_host (--rdzv-conf)")
    for key, value in pets.items():
        existing = env.get(key)
        if existing is not None and "value" in existing and key in ("PET_RDZV_CONF", "PET_RDZV_ID"):
            # The rule read the user's literal value and extended it (their conf keys plus
            # is_host; a unique id for `none`), exactly as the wrapper does on the command line.
            existing["value"] = value
        else:
            env.set_default(key, value)
    text = (
        f"{c.get('name')}: no command (its image entrypoint runs, unknown at admission), so torchrun is not "
        f"wrapped; it gets {', '.join(sorted(pets)) or 'no PET_* env'} instead"
    )
    if plan.backend == "c10d" and plan.is_host is None and plan.endpoint_problem:
        cannot.append("is_host (--rdzv-conf: the endpoint names no pod)")
    if cannot:
        text += f"; cannot set {', '.join(cannot)} (known only at run time): pass them on torchrun's command line"
    text += "; no preflight checks and no GLOO_SOCKET_IFNAME pinning. Give the container a command to be wrapped"
    ctx.warn(reasons.TORCHRUN_NOT_WRAPPED, text)
    if plan.endpoint_problem:
        ctx.warn(reasons.ENDPOINT_NAMES_NO_POD, f"{c.get('name')}: {plan.endpoint_problem}")
    if plan.fatal:
        ctx.problem(reasons.of_refusal(plan.fatal_kind), f"{c.get('name')}: not wrapped, cannot refuse: {plan.fatal}")


def _fabric_mode(ctx: Context) -> str:
    raw = ctx.annotations.get(names.ANN_FABRIC_PREFLIGHT)
    if raw is None:
        return ctx.params.config.fabric_preflight
    mode = raw.strip().lower()
    if mode in names.FABRIC_PREFLIGHT_MODES:
        return mode
    ctx.warn(
        reasons.ANNOTATION_IGNORED,
        f"annotation {names.ANN_FABRIC_PREFLIGHT}={raw!r} is not one of {', '.join(names.FABRIC_PREFLIGHT_MODES)}; "
        f"using {ctx.params.config.fabric_preflight}",
    )
    return ctx.params.config.fabric_preflight


def _keep_local_addr(ctx: Context) -> bool:
    raw = ctx.annotations.get(names.ANN_LOCAL_ADDR)
    if raw is None:
        return False
    if raw.strip().lower() == "keep":
        return True
    ctx.warn(reasons.ANNOTATION_IGNORED, f"annotation {names.ANN_LOCAL_ADDR}={raw!r} is not `keep`; ignored")
    return False


_NODE_COUNT = re.compile(r"[0-9]+(:[0-9]+)?")


def _nnodes(pod: Obj, ctx: Context) -> str:
    """The default --nnodes: the pod's annotation, else what the launcher implies, else for a
    job of several pods "unknown" (the wrapper then refuses rather than train alone) unless the
    containers carry torchrun's own PET_NNODES (the Training Operator and Trainer set it)."""
    raw = ctx.annotations.get(names.ANN_NNODES)
    if raw is not None:
        if _NODE_COUNT.fullmatch(raw.strip()) and rules.max_nodes(raw) > 0:
            return raw.strip()
        ctx.warn(
            reasons.ANNOTATION_IGNORED,
            f"annotation {names.ANN_NNODES}={raw!r} is not a node count (N or MIN:MAX); ignored",
        )
    if ctx.info.nnodes:
        return ctx.info.nnodes
    if ctx.info.launcher in _SINGLE_POD_LAUNCHERS or "PET_NNODES" in env_names(pod):
        return ""
    return rules.NNODES_UNKNOWN


# Launchers whose pods stand alone: nothing says they have siblings.
_SINGLE_POD_LAUNCHERS = ("pod",)


def wrap(pod: Obj, ctx: Context) -> StepOutcome:
    """The step: each training container's command starts the wrapper, with this pod's settings;
    the wrapper's files are delivered to the pod as the config says."""
    why = _not_wrappable(pod, ctx)
    if why:
        return why
    cfg = ctx.params.config
    # The files come from the image (mounted, or copied by an init container) or inline; with
    # no image configured there is nothing to mount or copy from.
    delivery = cfg.wrapper_delivery if cfg.wrapper_image else "inline"
    if delivery == "inline" and not ctx.params.wrapper_payload:
        return "no wrapper payload configured"
    spec = child(pod, "spec")
    owned, implied = _settings(pod, spec, ctx)
    containers = spec.get("containers") or []
    wrapped_any = False
    for index in ctx.training:
        if _wrap_container(spec, containers[index], ctx, owned, implied, delivery, store_port=not wrapped_any):
            wrapped_any = True
    if wrapped_any:
        _deliver(spec, containers[ctx.training[0]], delivery, cfg)
    return None


def _not_wrappable(pod: Obj, ctx: Context) -> str:
    """Why this pod's torchrun is not wrapped ("" when it is)."""
    if not ctx.flag(names.ANN_WRAP, ctx.params.config.wrap):
        return "turned off"
    info = ctx.info
    containers = pod["spec"]["containers"]
    if info.launcher == "mpijob" and not any(runs_torch_distributed(containers[i]) for i in ctx.training):
        # sshd on the workers, mpirun on the launcher: an ssh session sees nothing of the wrapper.
        return "an MPIJob pod: mpirun starts the ranks (over ssh on the workers); no torchrun to wrap"
    if not info.advertised_address:
        ctx.warn(
            reasons.TORCHRUN_NOT_WRAPPED,
            f"launcher {info.launcher}: no stable DNS name for this pod (set spec.hostname and "
            "spec.subdomain with a headless Service); torchrun is not wrapped",
        )
        return "no stable DNS name for this pod"
    return ""


def _settings(pod: Obj, spec: Obj, ctx: Context) -> tuple[dict[str, str], dict[str, str]]:
    """What the wrapper is told about this pod, and what it derives by itself from that (so it
    need not be sent). Not the wrapper's own defaults, nor what it derives from the rest
    (rules.implied; the pod's DNS zone when its resolver will have one): every byte is in every
    pod. A derived value that would be wrong is sent, empty if need be."""
    info, cfg = ctx.info, ctx.params.config
    owned = {
        names.ENV_LAUNCHER: info.launcher,
        names.ENV_LOCAL_ADDR: info.advertised_address,
        names.ENV_IDENTITIES: ",".join(info.longest_identities(ctx.params.namespace, cfg.cluster_domain)),
        names.ENV_PEERS: ",".join(info.peers),
        names.ENV_RDZV_ID: info.rdzv_id,
        names.ENV_RDZV_BACKEND: info.rdzv_backend,
        names.ENV_RDZV_ENDPOINT: info.rdzv_endpoint,
        names.ENV_NNODES: _nnodes(pod, ctx),
        names.ENV_GLOO_IFNAME: "1" if ctx.flag(names.ANN_GLOO_IFNAME, cfg.gloo_socket_ifname) else "0",
        names.ENV_NCCL_IFNAME: "1" if ctx.flag(names.ANN_NCCL_IFNAME, cfg.nccl_socket_ifname) else "0",
        names.ENV_DNS_TIMEOUT: str(cfg.dns_timeout_seconds),
        names.ENV_MIN_TORCH: cfg.min_torch,
        names.ENV_FABRIC_PREFLIGHT: _fabric_mode(ctx),
        names.ENV_KEEP_LOCAL_ADDR: "1" if _keep_local_addr(ctx) else "",
        names.ENV_REQUIRE_RDMA: "1" if ctx.flag(names.ANN_REQUIRE_RDMA, cfg.require_rdma) else "",
    }
    namespace = ctx.params.namespace
    zone = (
        f"{namespace}.svc.{cfg.cluster_domain}"
        if namespace and spec.get("dnsPolicy") == names.CLUSTER_DNS_POLICY
        else ""
    )
    implied = rules.implied(owned, zone)
    owned = {k: v for k, v in owned.items() if (v and v != rules.DEFAULTS.get(k)) or k in implied}
    return owned, implied


def _wrap_container(
    spec: Obj, c: Obj, ctx: Context, owned: dict[str, str], implied: dict[str, str], delivery: str, store_port: bool
) -> bool:
    """Wrap one training container's command (True), or give a container without one the
    PET_* env that brings torchrun to the same decision (False)."""
    env = Env(c)
    # One packed setting; a name the container already declares keeps getting our value
    # under that name too (so the two never disagree), as does a value with a ";".
    packed: dict[str, str] = {}
    for key, value in owned.items():
        if env.get(key) is not None or ";" in value:
            env.set_owned(key, value)
        elif implied.get(key) != value:
            packed[key] = value
    # The wrapper writes why it refuses to start where the kubelet reads the container's
    # termination message: sent only for a path other than the kubelet's default.
    path = c.get("terminationMessagePath")
    if isinstance(path, str) and path != rules.TERMINATION_LOG:
        if env.get(names.ENV_TERMINATION_LOG) is not None or ";" in path:
            env.set_owned(names.ENV_TERMINATION_LOG, path)
        else:
            packed[names.ENV_TERMINATION_LOG] = path
    if not c.get("command") and not is_wrapped(c):
        _pet_fallback(c, env, ctx, owned)
        return False
    command = Command(c)
    _endpoint_check(c, command, ctx, owned)
    if store_port:
        _store_port(spec, c, command, ctx)
    rest = _unwrapped(c["command"])
    rest = list(c["command"]) if rest is None else rest
    # The settings are the bootstrap's first argument (it exports them as HOSTNET_RDMA_POD):
    # ~40 bytes fewer than an env entry, in every pod.
    settings = rules.pack(packed)
    if delivery != "inline":
        c["command"] = [BOOTSTRAP_PATH, settings, *rest]
    else:
        c["command"] = ["/bin/sh", "-c", BOOTSTRAP, names.BOOTSTRAP_ARGV0, ctx.params.wrapper_payload, settings, *rest]
    if delivery == "imageVolume":
        # The wrapper image's files themselves: no copy, no extra container, and with the
        # wrapper-only image no subPath either. Image volumes are always mounted read-only,
        # so the mount does not say so (16 bytes a pod).
        add_mount(c, names.VOL_BIN, names.BIN_DIR, sub_path=ctx.params.config.wrapper_image_sub_path)
    else:
        add_mount(c, names.VOL_BIN, names.BIN_DIR)
    return True


def _deliver(spec: Obj, first: Obj, delivery: str, cfg: InjectConfig) -> None:
    """The wrapper's files in the pod: the image as a volume, or an emptyDir the bootstrap (inline)
    or an init container (copying from the image) fills."""
    image, pull = cfg.wrapper_image, cfg.wrapper_image_pull_policy
    if delivery == "imageVolume":
        add_volume(spec, {"name": names.VOL_BIN, "image": {"reference": image, "pullPolicy": pull}})
    else:
        add_volume(spec, {"name": names.VOL_BIN, "emptyDir": dict(BIN_EMPTY_DIR)})
    if delivery == "initContainer":
        _add_init_container(spec, image, pull, _init_resources(first, cfg.init_resources))


STORE_PORT_NAME = "hostnet-rdzv"
_OWN_ENDPOINT_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr")


def _store_port(spec: Obj, c: Obj, command: Command, ctx: Context) -> None:
    """On the pod that hosts the job's c10d store at the launcher's default endpoint, declare the
    store's port on its (first) training container. On the host network a container port is a
    host port, and the scheduler never puts two pods asking for one host port on one node: two
    jobs whose store ports collide (a hash over rdzvPortSpan, or a pinned port) then wait for
    each other instead of one store failing to bind. Left out where the command names its own
    endpoint (its port is the command's), or any container already declares that port."""
    info = ctx.info
    endpoint = info.rdzv_endpoint
    if (
        not ctx.params.config.store_host_port
        or not endpoint
        or info.rdzv_backend not in ("", "c10d")
        or ":" not in endpoint
    ):
        return
    port_text = endpoint.rsplit(":", 1)[1]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return
    cfg = ctx.params.config
    if not rules.is_own_endpoint(endpoint, info.identities(ctx.params.namespace, cfg.cluster_domain)):
        return
    if command.too_large:
        return
    words = command.torchrun or []
    if any(w.split("=", 1)[0] in _OWN_ENDPOINT_FLAGS for w in words) or Env(c).get("PET_RDZV_ENDPOINT") is not None:
        return
    port = int(port_text)
    declared = [p for x in spec.get("containers") or [] for p in (x.get("ports") or []) if isinstance(p, dict)]
    if any(port in (p.get("containerPort"), p.get("hostPort")) for p in declared):
        return
    entry: Obj = {"containerPort": port, "hostPort": port, "protocol": "TCP"}
    if not any(p.get("name") == STORE_PORT_NAME for p in declared):
        entry["name"] = STORE_PORT_NAME
    child_list(c, "ports").append(entry)


# What the init container mirrors of the training container's resources: never its GPUs or RDMA
# devices (a device plugin would hand them to the init container first).
_MIRRORED = ("cpu", "memory", "ephemeral-storage")


def _init_resources(training: Obj, configured: dict[str, dict[str, str]]) -> Obj:
    """The init container's resources: as configured, else the training container's own (see
    InjectConfig.init_resources: accepted wherever the training container is, adding nothing
    to the pod's effective requests)."""
    if configured:
        return {kind: dict(values) for kind, values in configured.items() if values}
    raw = training.get("resources")
    own: Obj = raw if isinstance(raw, dict) else {}
    out: Obj = {}
    for kind in ("requests", "limits"):
        found = own.get(kind)
        values: Obj = found if isinstance(found, dict) else {}
        picked = {k: values[k] for k in _MIRRORED if k in values}
        if picked:
            out[kind] = picked
    return out


def _add_init_container(spec: Obj, image: str, pull_policy: str, resources: Obj) -> None:
    """The init container that copies the wrapper from the webhook's image into the emptyDir.
    Last among init containers: it needs nothing from the others, and a native sidecar the
    user puts first keeps its place."""
    inits = child_list(spec, "initContainers")
    if find_named(inits, names.INIT_CONTAINER) is not None:
        return
    container: Obj = {
        "name": names.INIT_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        # A plain copy: a Python start-up per pod cost more than the copy itself.
        "command": list(INIT_COMMAND),
    }
    if resources:
        container["resources"] = resources
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    container["volumeMounts"] = [{"name": names.VOL_BIN, "mountPath": names.BIN_DIR}]
    inits.append(container)
