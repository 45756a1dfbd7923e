"""Property tests over generated pods: the patch always applies, names stay unique,
mutation is idempotent, non-hostNetwork pods are untouched."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import Params, UnsupportedPod, mutate, shwords
from app.core import patch as jp
from tests.patching import apply_patch

ROOT = Path(__file__).resolve().parents[1]

PARAMS = Params(namespace="ns", wrapper_payload="<payload>", version="test")

dns_label = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
env_key = st.sampled_from(
    [
        "NCCL_DEBUG",
        "NCCL_IB_HCA",
        "PET_RDZV_ENDPOINT",
        "PET_RDZV_BACKEND",
        "MASTER_ADDR",
        "FOO",
        "HOSTNET_RDMA_LOCAL_ADDR",
        "VC_WORKER_NUM",
        "VC_WORKER_HOSTS",
        "LWS_LEADER_ADDRESS",
        "PET_MASTER_ADDR",
    ]
)
env_entry = st.fixed_dictionaries({"name": env_key}, optional={"value": st.text(max_size=12)})
mount_path = st.sampled_from(["/dev/shm", "/dev/infiniband", "/data", "/hostnet-rdma", "/scripts"])
volume_name = st.sampled_from(
    ["shm", "devinf", "data", "hostnet-rdma-shm", "hostnet-rdma", "hostnet-rdma-ib", "scripts"]
)
command = st.one_of(
    st.none(),
    st.just(["torchrun", "train.py"]),
    st.just(["bash", "-c", "torchrun --nnodes=2 train.py"]),
    st.just(["python", "-m", "torch.distributed.run", "train.py"]),
    st.just(["sleep", "1"]),
)
caps = st.fixed_dictionaries(
    {},
    optional={
        "add": st.lists(st.sampled_from(["IPC_LOCK", "SYS_ADMIN", "NET_ADMIN", "CAP_IPC_LOCK"]), max_size=3),
        "drop": st.lists(st.sampled_from(["ALL", "IPC_LOCK", "NET_RAW"]), max_size=2),
    },
)
security = st.fixed_dictionaries(
    {}, optional={"privileged": st.booleans(), "allowPrivilegeEscalation": st.booleans(), "capabilities": caps}
)


@st.composite
def containers(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(dns_label, min_size=1, max_size=3, unique=True))
    out = []
    for n in names:
        c: dict[str, Any] = {"name": n, "image": "img"}
        cmd = draw(command)
        if cmd is not None:
            c["command"] = cmd
        if draw(st.booleans()):
            c["env"] = draw(st.lists(env_entry, max_size=4, unique_by=lambda e: e["name"]))
        if draw(st.booleans()):
            paths = draw(st.lists(mount_path, max_size=3, unique=True))
            c["volumeMounts"] = [{"name": f"m{i}", "mountPath": p} for i, p in enumerate(paths)]
        if draw(st.booleans()):
            c["securityContext"] = draw(security)
        if draw(st.booleans()):
            c["resources"] = {
                "limits": draw(
                    st.dictionaries(st.sampled_from(["nvidia.com/gpu", "rdma/hca", "cpu"]), st.just(1), max_size=2)
                )
            }
        out.append(c)
    return out


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    labels = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "volcano.sh/job-name",
                    "volcano.sh/task-spec",
                    "training.kubeflow.org/job-name",
                    "jobset.sigs.k8s.io/jobset-name",
                    "leaderworkerset.sigs.k8s.io/name",
                    "batch.kubernetes.io/job-completion-index",
                    "statefulset.kubernetes.io/pod-name",
                ]
            ),
            dns_label,
            max_size=3,
        )
    )
    annotations = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "hostnet-rdma.io/profile",
                    "hostnet-rdma.io/skip",
                    "hostnet-rdma.io/shm-size",
                    "hostnet-rdma.io/wrap",
                    "hostnet-rdma.io/containers",
                    "scheduling.k8s.io/group-name",
                ]
            ),
            st.sampled_from(["BM.GPU4.8", "default", "x", "false", "true", "8Gi", "shm,wrap", "main"]),
            max_size=3,
        )
    )
    spec: dict[str, Any] = {"containers": draw(containers())}
    spec["hostNetwork"] = draw(st.sampled_from([True, True, True, False, None]))
    if spec["hostNetwork"] is None:
        del spec["hostNetwork"]
    for key in ("hostname", "subdomain"):
        if draw(st.booleans()):
            spec[key] = draw(dns_label)
    if draw(st.booleans()):
        spec["dnsPolicy"] = draw(st.sampled_from(["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]))
    if draw(st.booleans()):
        vols = draw(st.lists(volume_name, max_size=3, unique=True))
        spec["volumes"] = [{"name": v, "emptyDir": {}} for v in vols]
    meta: dict[str, Any] = {"labels": labels, "annotations": annotations}
    if draw(st.booleans()):
        meta["name"] = draw(dns_label)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _dupes(items: list[Any], key: str) -> list[Any]:
    return [k for k, n in Counter(i.get(key) for i in items).items() if n > 1]


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_patch_applies_and_is_idempotent(pod: dict[str, Any]) -> None:
    try:
        result = mutate(pod, PARAMS)
    except UnsupportedPod:
        return
    if pod["spec"].get("hostNetwork") is not True:
        assert result.pod == pod and not result.changed
        assert jp.diff(pod, result.pod) == []
        return
    ops = jp.diff(pod, result.pod)
    assert apply_patch(pod, ops) == result.pod
    spec = result.pod["spec"]
    # Volumes the user did not declare twice are never duplicated by us.
    assert not _dupes(spec.get("volumes", []), "name")
    for c in spec["containers"]:
        before = next(x for x in pod["spec"]["containers"] if x["name"] == c["name"])
        assert not _dupes(c.get("env", []), "name") or _dupes(before.get("env", []), "name")
        assert not _dupes(c.get("volumeMounts", []), "mountPath") or _dupes(before.get("volumeMounts", []), "mountPath")
        # What the user set is never overwritten.
        for e in before.get("env", []):
            if not e["name"].startswith("HOSTNET_RDMA_"):
                assert e in c["env"]
        sc_before = before.get("securityContext", {})
        if "privileged" in sc_before:
            assert c["securityContext"]["privileged"] == sc_before["privileged"]
        for cap in sc_before.get("capabilities", {}).get("add", []):
            assert cap in c["securityContext"]["capabilities"]["add"]
        # Every mount refers to a declared volume (ours are always declared).
        declared = {v["name"] for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            if m["name"].startswith("hostnet-rdma-") and m not in before.get("volumeMounts", []):
                assert m["name"] in declared
    again = mutate(result.pod, PARAMS)
    assert again.pod == result.pod
    assert jp.diff(result.pod, again.pod) == []


@settings(max_examples=200, deadline=None)
@given(pods())
def test_input_is_never_modified(pod: dict[str, Any]) -> None:
    import copy

    snapshot = copy.deepcopy(pod)
    with contextlib.suppress(UnsupportedPod):
        mutate(pod, PARAMS)
    assert pod == snapshot


def _bash_words(script: str) -> list[str]:
    """The argv bash gives `printf` for the script's words."""
    import subprocess
    import tempfile

    # A first word of our own: printf with no argument at all would still print one (empty).
    # Pathname and brace expansion off (`*`, `{a,b}` are the shell's at run time, as `$(...)` is).
    # In an empty folder of its own: a script that redirects (a generator's mistake) writes nothing here.
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(["bash", "-c", "set -f +B; printf '%s\\0' _ " + script], capture_output=True, timeout=10,
                             cwd=cwd)  # fmt: skip
    assert out.returncode == 0, (script, out.stderr)
    return out.stdout.decode().split("\0")[1:-1]


# The words that published manifests write: plain text, quoted strings, escapes, a `#` inside a
# word, and line continuations; no expansions (bash would run them: ours keeps them as written).
_PLAIN_CHARS = "abz09=.,:/_+-%@^!{}[]*?"  # not `~` first in a word: bash makes it $HOME
_atom = st.one_of(
    st.text(alphabet=_PLAIN_CHARS, min_size=1, max_size=6),
    st.text(alphabet=_PLAIN_CHARS + ' #;&|<>()$`"\n\t', max_size=6).map(lambda t: "'" + t + "'"),
    st.text(alphabet=_PLAIN_CHARS + " #;&|<>()'\n\t", max_size=6).map(lambda t: '"' + t + '"'),
    st.sampled_from(['"\\$"', '"\\`"', '"\\\\"', '"\\""', '"\\q"', '"a\\\nb"']),  # escapes in double quotes
    st.sampled_from(list(" #;&|<>()'\"$`\\abc")).map(lambda c: "\\" + c),  # a backslash outside quotes
    st.just("\\\n"),  # a line continuation
    st.sampled_from(["a#b", "x#"]),  # `#` inside a word is a character
)
_gap = st.sampled_from([" ", "  ", "\t", " \\\n  ", ""])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_atom, _gap), min_size=1, max_size=8), st.booleans())
def test_script_split_is_what_bash_passes(parts: list[tuple[str, str]], comment: bool) -> None:
    """A differential test against real bash, as the argv parser is checked against torch's:
    the admission-time split is the argv the shell will pass (tutorials' `torchrun \\` then one
    flag a line were misread: the continuation was a word, the next flag not recognised)."""
    script = "".join(a + g for a, g in parts) + (" # a comment 'x" if comment else "")
    assert shwords.split(script) == _bash_words(script)


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("torchrun \\\n  --nnodes=2 \\\n  --nproc-per-node=8 \\\n  train.py",
         ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"]),
        ('torchrun --local-addr=$(IFS=", " read a b <<< "$(hostname -i)"; echo $a) t.py',
         ["torchrun", '--local-addr=$(IFS=", " read a b <<< "$(hostname -i)"; echo $a)', "t.py"]),
        ("torchrun --local-addr=`hostname -f` t.py", ["torchrun", "--local-addr=`hostname -f`", "t.py"]),
        ('torchrun --nnodes="${NNODES:-2}" --node-rank=$((RANK + 0)) t.py',
         ["torchrun", "--nnodes=${NNODES:-2}", "--node-rank=$((RANK + 0))", "t.py"]),
        ("torchrun t.py a\\", ["torchrun", "t.py", "a\\"]),  # a backslash that ends the script: bash keeps it
        ("set -e\ncd /w && exec torchrun t.py # go\necho done",
         ["set", "-e", "\n", "cd", "/w", "&&", "exec", "torchrun", "t.py", "\n", "echo", "done"]),
    ],
)  # fmt: skip
def test_script_split_keeps_expansions_whole(script: str, words: list[str]) -> None:
    """What runs at run time stays one word, as written (it reads as decided at run time)."""
    assert shwords.split(script) == words


@pytest.mark.parametrize("script", ["'open", '"open', "$(open", "`open", "${open"])
def test_script_split_refuses_what_bash_refuses(script: str) -> None:
    import subprocess

    with pytest.raises(ValueError):
        shwords.split(script)
    assert subprocess.run(["bash", "-n", "-c", "printf %s " + script], capture_output=True).returncode != 0


@pytest.mark.parametrize("path", sorted(str(p) for p in (ROOT / "tests").glob("golden*/**/*.yaml")))
def test_script_split_of_every_golden_script_is_bashs_where_it_has_no_expansion(path: str) -> None:
    doc = yaml.safe_load(Path(path).read_text())
    pod = doc.get("pod", doc) if isinstance(doc, dict) else {}
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        for word in [*(c.get("command") or []), *(c.get("args") or [])]:
            if isinstance(word, str) and " " in word:
                words = shwords.split(word)  # never raises on a script the goldens hold
                if not any(ch in word for ch in "$`\n;&|<>()"):
                    assert words == _bash_words(word)


@pytest.mark.slow
@settings(max_examples=3000)
@given(st.one_of(st.ip_addresses().map(str), st.text(alphabet="0123456789abcdefgx.:%-", max_size=45)))
def test_fast_ip_check_agrees_with_ipaddress(host: str) -> None:
    import ipaddress

    from app.wrapper.rules import is_ip

    try:
        ipaddress.ip_address(host)
        want = True
    except ValueError:
        want = False
    assert is_ip(host) is want


def test_reinvocation_does_not_decide_what_the_first_pass_could_not() -> None:
    """Found by test_patch_applies_and_is_idempotent: a container with no command (PET_* env
    instead of the wrapper) whose endpoint comes from a variable unknown at admission. The
    first pass writes PET_RDZV_ENDPOINT=$(LWS_LEADER_ADDRESS):23456 and cannot set is_host; a
    second pass read that value as a literal host, decided is_host=false, and changed the pod."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "a", "labels": {"leaderworkerset.sigs.k8s.io/name": "a"}, "annotations": {}},
           "spec": {"hostNetwork": True, "containers": [{"name": "a", "image": "img",
                                                         "env": [{"name": "LWS_LEADER_ADDRESS"}]}]}}  # fmt: skip
    first = mutate(pod, PARAMS)
    env = {e["name"]: e.get("value") for e in first.pod["spec"]["containers"][0]["env"]}
    assert env["PET_RDZV_ENDPOINT"] == "$(LWS_LEADER_ADDRESS):23456" and "PET_RDZV_CONF" not in env
    assert any("cannot set" in w.text and "is_host" in w.text for w in first.warnings), first.warnings
    again = mutate(first.pod, PARAMS)
    assert again.pod == first.pod


@pytest.mark.slow
@settings(max_examples=2000)
@given(st.one_of(st.from_regex(r"\A ?[0-9]{1,4}(\.[0-9]{1,2})?(Ki|Mi|Gi|Ti|k|M|G|T|x)? ?\Z"), st.text(max_size=8)))
def test_quantity_memo_answers_as_the_parser_and_stays_bounded(text: str) -> None:
    import re

    from app.core import quantity

    m = re.fullmatch(quantity.PATTERN, text.strip()) if text.isascii() else None
    want = None if m is None else int(float(m.group(1)) * quantity._FACTOR[m.group(2)])
    assert quantity.parse(text) == want
    assert quantity.parse(text) == want  # the second answer comes from the memo
    assert len(quantity._SEEN) <= 1024


def test_quantity_memo_keeps_no_long_string() -> None:
    from app.core import quantity

    long = "0" * 100_000 + "1Gi"  # an annotation value is user input, and may be this long
    assert quantity.parse(long) == 2**30
    assert quantity.parse("9" * 400 + "Gi") is None  # beyond a float: not a size, not a crash
    assert long not in quantity._SEEN
    assert all(len(k) <= quantity._SEEN_MAX_LENGTH for k in quantity._SEEN)


def test_pet_names_of_every_torchrun_option() -> None:
    from app.wrapper import rules

    assert rules.pet_name("--rdzv-endpoint") == "PET_RDZV_ENDPOINT"
    assert rules.pet_name("--nproc-per-node") == "PET_NPROC_PER_NODE"
    for option in set(rules.LONG.values()):
        assert rules.pet_name(option) == "PET_" + option[2:].replace("-", "_").upper()
    assert rules.pet_name("--not-an-option") == "PET_NOT_AN_OPTION"


def test_script_split_memo_gives_fresh_lists_and_stays_bounded() -> None:
    script = 'set -e; torchrun --nnodes="$N" train.py'
    first = shwords.split(script)
    first.append("poisoned")  # a caller's list is its own
    assert shwords.split(script) == ["set", "-e", ";", "torchrun", "--nnodes=$N", "train.py"]
    for i in range(shwords._SPLIT_MAX + 10):
        shwords.split(f"echo {i} && torchrun train.py")
    assert len(shwords._SPLIT) <= shwords._SPLIT_MAX
    huge = "torchrun " + "x " * shwords._SPLIT_MAX_LENGTH  # user input: split, never kept
    assert shwords.split(huge)[0] == "torchrun"
    assert huge not in shwords._SPLIT


@pytest.mark.slow
@settings(max_examples=2000)
@given(
    st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
    st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,6}\*?", fullmatch=True), min_size=1, max_size=3),
)
def test_peer_patterns_match_as_fnmatch_does(host: str, peers: list[str]) -> None:
    import fnmatch

    from app.wrapper import rules

    identities = ["w-0", "w-0.sub", "w-0.sub.ns", "w-0.sub.ns.svc"]
    suffixes = {i[len("w-0") :] for i in identities if i.startswith("w-0.")} | {""}
    # A name of this pod's own always names a pod of the job, whatever the patterns say.
    want = host in identities or any(fnmatch.fnmatchcase(host, p + s) for p in peers for s in suffixes)
    # For the names launchers make (a DNS label, a trailing `*`), names and prefixes are what
    # fnmatch would say; other characters are never a pattern (tests/test_tenant_cost.py).
    assert rules.names_a_pod(host, identities, peers) is want


@settings(max_examples=300)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=30))  # fmt: skip
def test_the_pod_copy_is_deep_where_json_can_be_written(value: Any) -> None:
    from app.core.mutate import MAX_NESTING, _json_copy

    copy = _json_copy(value, MAX_NESTING)
    assert copy == value

    def containers(v: Any) -> list[Any]:
        if isinstance(v, dict):
            return [v, *(c for x in v.values() for c in containers(x))]
        if isinstance(v, list):
            return [v, *(c for x in v for c in containers(x))]
        return []

    mine = {id(c) for c in containers(value)}
    assert not any(id(c) in mine for c in containers(copy))


def test_labels_of_a_hand_written_pod_are_read_as_strings() -> None:
    from app.core.launchers.base import pod_annotations, pod_labels

    api = {"metadata": {"labels": {"a": "1"}, "annotations": {"b": "x"}}}
    assert pod_labels(api) is api["metadata"]["labels"]  # as the API server sends them: no copy
    yaml_pod = {"metadata": {"labels": {"a": 1, 2: True}, "annotations": None}}
    assert pod_labels(yaml_pod) == {"a": "1", "2": "True"} and pod_annotations(yaml_pod) == {}


def test_the_written_out_inits_take_the_dataclass_fields() -> None:
    # The compiled core's dataclasses have their __init__ written out (the generated one runs
    # interpreted): each must still take every field, in order, with the field's default.
    import dataclasses
    import inspect
    import sys

    from app.core.inject import Context
    from app.core.launchers.base import LauncherInfo
    from app.core.mutate import Result
    from app.webhook.review import ReviewResult

    checked = []
    for cls in (LauncherInfo, Result, Context, ReviewResult):
        fields = dataclasses.fields(cls)
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        if [p.kind for p in params] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            continue  # compiled (tests/test_compiled.py): mypyc does not expose the names; the source run checks
        checked.append(cls)
        assert [p.name for p in params] == [f.name for f in fields], cls.__name__
        for f, p in zip(fields, params, strict=True):
            if f.default is not dataclasses.MISSING:
                assert p.default == f.default, (cls.__name__, f.name)
            elif f.default_factory is not dataclasses.MISSING:
                assert p.default is None, (cls.__name__, f.name)  # None stands for a fresh one
            else:
                assert p.default is inspect.Parameter.empty, (cls.__name__, f.name)
        if cls is ReviewResult:  # the one built here from nothing but its required fields
            made = cls(b"{}", "mutated")
            for f in fields:
                if f.default_factory is not dataclasses.MISSING:
                    assert getattr(made, f.name) == f.default_factory(), f.name
    compiled = str(getattr(sys.modules["app.core.mutate"], "__file__", "")).endswith((".so", ".pyd"))
    assert compiled or checked == [LauncherInfo, Result, Context, ReviewResult]


def test_script_split_of_deeply_nested_substitutions_is_one_pass() -> None:
    """A tenant's script nesting `$(` 20,000 deep: the splitter recursed and the review ended in
    RecursionError (an internal error, found by tests/test_adversarial.py)."""
    deep = "torchrun --local-addr=" + "$(" * 20_000 + "x" + ")" * 20_000 + " t.py"
    assert shwords.split(deep) == ["torchrun", deep.split()[1], "t.py"]
    with pytest.raises(ValueError, match="No closing parenthesis"):
        shwords.split("$(" * 20_000)


_EVERY_SPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


@given(st.text(alphabet="aé-\u200b" + _EVERY_SPACE, max_size=300))
@settings(max_examples=400)
def test_a_warning_is_folded_to_one_line_of_single_spaces_whatever_it_holds(text: str) -> None:
    # review._warning skips the fold for text that is already folded: the same answer as folding.
    from app.webhook import review

    want = review.WARNING_PREFIX + " ".join(text.split())
    want = want if len(want) <= review.MAX_WARNING else want[: review.MAX_WARNING - 3] + "..."
    assert review._warning(text) == want
    assert not any(ch.isprintable() for ch in _EVERY_SPACE.replace(" ", ""))  # what the skip relies on
