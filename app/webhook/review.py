"""AdmissionReview (admission.k8s.io/v1) in, AdmissionReview out. Pure: no HTTP, no I/O.

Two error families, enforced here and only here:
- the *review request* is malformed (not JSON, wrong apiVersion/kind, no request/uid/object)
  -> BadReview -> HTTP 400 with a one-line reason; nothing is mutated;
- the *pod* is one we cannot handle safely, or something unexpected breaks -> the pod is
  allowed unchanged with an admission warning (a bad patch would fail pod creation even
  under failurePolicy: Ignore). We never deny: this webhook only adds plumbing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import orjson
import pybase64

from app import __version__, events
from app.core import InjectConfig, InvalidPod, Params, UnsupportedPod, Warned, mutate, patch, reasons
from app.core.mutate import Result, json_type_name
from app.core.names import STATUS_ANNOTATION
from app.wrapper import payload

API_VERSION = "admission.k8s.io/v1"


def params_for(config: InjectConfig, namespace: str) -> Params:
    """What every shell (server, `mutate`, `explain`) hands the core: this config, the wrapper
    files of this build, this version."""
    return Params(config=config, namespace=namespace, wrapper_payload=payload(), version=__version__)


WARNING_PREFIX = "hostnet-rdma: "
MAX_WARNING = 240  # the API server truncates longer warnings


class AdmissionResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    patchType: Literal["JSONPatch"]
    patch: str
    warnings: list[str]


class BadReview(ValueError):
    """The review request itself is malformed: HTTP 400."""


# What became of a review: the pod was patched; needed nothing; was no pod CREATE; could not be
# handled safely (allowed unchanged, with a warning); or broke something (allowed unchanged).
Outcome = Literal["mutated", "unchanged", "skipped", "unsupported", "error"]


@dataclass
class ReviewResult:
    body: bytes
    outcome: Outcome
    launcher: str = ""
    uid: str = ""
    namespace: str = ""
    name: str = ""
    warnings: list[Warned] = field(default_factory=list)
    # For an Event on the pod's job (app.events); None on dry runs, re-admissions of a pod we
    # already mutated, and pods that no job owns.
    admission: events.Admission | None = None

    # Written out, as the core's Result: the generated one runs interpreted in the compiled module.
    def __init__(
        self,
        body: bytes,
        outcome: Outcome,
        *,
        launcher: str = "",
        uid: str = "",
        namespace: str = "",
        name: str = "",
        warnings: list[Warned] | None = None,
        admission: events.Admission | None = None,
    ) -> None:
        self.body = body
        self.outcome = outcome
        self.launcher = launcher
        self.uid = uid
        self.namespace = namespace
        self.name = name
        self.warnings = [] if warnings is None else warnings
        self.admission = admission

    # The named constructors: each answers the review (build_response) as its outcome needs.
    @classmethod
    def skipped(cls, uid: str, namespace: str) -> ReviewResult:
        return ReviewResult(build_response(uid), "skipped", uid=uid, namespace=namespace)

    @classmethod
    def left_unchanged(
        cls,
        outcome: Literal["unsupported", "error"],
        uid: str,
        why: Warned,
        namespace: str = "",
        name: str = "",
        launcher: str = "",
        admission: events.Admission | None = None,
    ) -> ReviewResult:
        """Allowed as it came, with `why` as its one warning."""
        msg = [why]
        return ReviewResult(build_response(uid, warnings=msg), outcome, launcher=launcher, uid=uid, namespace=namespace,
                            name=name, warnings=msg, admission=admission)  # fmt: skip

    @classmethod
    def of(
        cls,
        uid: str,
        ops: bytes | None,
        result: Result,
        namespace: str,
        name: str,
        admission: events.Admission | None,
    ) -> ReviewResult:
        """The core's answer: `ops` (the patch, encoded) when it changed the pod."""
        return ReviewResult(build_response(uid, ops, result.warnings), "mutated" if ops else "unchanged",
                            launcher=result.info.launcher if result.info else "", uid=uid, namespace=namespace,
                            name=name, warnings=result.warnings, admission=admission)  # fmt: skip


def _warning(text: str) -> str:
    # One line, single spaces. Every whitespace str.split() splits on but " " is unprintable,
    # so a printable text without doubled or outer spaces is already that (most warnings).
    if not text.isprintable() or "  " in text or text[:1] == " " or text[-1:] == " ":
        text = " ".join(text.split())
    text = WARNING_PREFIX + text
    return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 3] + "..."


def build_response(
    uid: str, ops: list[dict[str, Any]] | bytes | None = None, warnings: list[Warned] | None = None
) -> bytes:
    """The one place that copies the UID and serialises the patch (`ops` may come encoded)."""
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        encoded = ops if isinstance(ops, bytes) else orjson.dumps(ops)
        # binascii's loop took ~1 ns a byte: a patch of a few KiB, a few % of a review
        response["patch"] = pybase64.b64encode_as_string(encoded)
    if warnings:
        response["warnings"] = [_warning(w.text) for w in warnings]
    return orjson.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})


def parse(body: bytes) -> dict[str, Any]:
    """Validate the envelope; return the `request` object."""
    if not body:
        raise BadReview("empty body: expected an admission.k8s.io/v1 AdmissionReview")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadReview("body is not JSON: expected an admission.k8s.io/v1 AdmissionReview") from None
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"expected apiVersion {API_VERSION} kind AdmissionReview, "
            f"got {_shown(review.get('apiVersion'))} {_shown(review.get('kind'))}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview request has no uid")
    if not isinstance(request.get("namespace", ""), str | None):
        raise BadReview("AdmissionReview request.namespace is not a string")
    return request


def _shown(value: Any) -> str:
    """A field of a forged review in a message: a string quoted and cut, anything else by its
    JSON type. Never repr() or str() of the value: a list nested a thousand deep has neither (it
    raises RecursionError), and a long one would make a long answer."""
    if isinstance(value, str):
        return repr(value[:64] + ("..." if len(value) > 64 else ""))
    return json_type_name(value)


def answer(body: bytes, params: Params) -> ReviewResult:
    """Handle one review body. Raises BadReview for a malformed envelope only."""
    request = parse(body)
    uid: str = request["uid"]
    try:
        return _review(request, uid, params)
    except BadReview:
        raise
    except Exception as e:  # never a traceback to the API server; the pod goes through unchanged
        why = Warned(
            reasons.POD_LEFT_UNCHANGED, f"pod left unchanged: internal error ({type(e).__name__}); please report it"
        )
        obj = request.get("object")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        return ReviewResult.left_unchanged("error", uid, why, request.get("namespace") or "",
                                           _pod_name(meta if isinstance(meta, dict) else {}))  # fmt: skip


def _pod_name(meta: dict[str, Any]) -> str:
    """The pod's name or generateName for the log, "" when neither is a string (a forged pod)."""
    name = meta.get("name") or meta.get("generateName")
    return name if isinstance(name, str) else ""


# The Params of the request's namespace, made once per namespace for the live Params (the
# server's until a config reload): dataclasses.replace costs more than the lookup. Bounded.
_NAMESPACED: list[Any] = [None, {}]


def _in_namespace(params: Params, namespace: str) -> Params:
    if _NAMESPACED[0] is not params:
        _NAMESPACED[0], _NAMESPACED[1] = params, {}
    known: dict[str, Params] = _NAMESPACED[1]
    found = known.get(namespace)
    if found is None:
        if len(known) >= 1024:
            known.clear()
        found = known[namespace] = dataclasses.replace(params, namespace=namespace)
    return found


def _review(request: dict[str, Any], uid: str, params: Params) -> ReviewResult:
    namespace: str = request.get("namespace") or ""  # a string or null (parse)
    operation = request.get("operation")
    kind = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    if operation is not None and operation != "CREATE":
        return ReviewResult.skipped(uid, namespace)
    if kind and (kind.get("kind") != "Pod" or kind.get("group", "") != ""):
        return ReviewResult.skipped(uid, namespace)
    pod = request.get("object")
    if not isinstance(pod, dict):
        raise BadReview("AdmissionReview request has no object")
    raw_meta = pod.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = _pod_name(meta)
    if namespace and namespace != params.namespace:
        params = _in_namespace(params, namespace)
    # An Event on the pod's job (app.events), on its first admission only: not a dry run, not
    # a pod that already carries our status. Here only a tuple: the recorder's thread does the rest.
    first = request.get("dryRun") is not True
    if first:
        annotations = meta.get("annotations")
        first = not (isinstance(annotations, dict) and STATUS_ANNOTATION in annotations)
    try:
        result: Result = mutate(pod, params)
    except (InvalidPod, UnsupportedPod) as e:
        why = Warned(reasons.POD_LEFT_UNCHANGED, f"pod left unchanged: {e}")
        told = None
        if first:
            told = events.admission(meta, namespace or params.namespace, "", params.version, False, (), "", [why])
        return ReviewResult.left_unchanged("unsupported", uid, why, namespace, name, admission=told)
    launcher = result.info.launcher if result.info else ""
    told = None
    if first and result.info is not None and (result.changed or result.warnings):
        chosen = "the default" if result.profile_reason == "default" else result.profile_reason
        told = events.admission(meta, namespace or params.namespace, launcher, params.version, result.changed,
                                result.applied, f"{result.profile}: {chosen}", result.warnings)  # fmt: skip
    if not result.changed:
        return ReviewResult.of(uid, None, result, namespace, name, told)
    ops = patch.diff(pod, result.pod)  # result.changed: there is at least one op
    encoded = orjson.dumps(ops)  # once: for the bound and for the answer
    size = len(encoded)
    if size > params.config.max_patch_bytes:
        why = Warned(reasons.POD_LEFT_UNCHANGED, f"pod left unchanged: its patch would be {size} bytes, over the "
                     f"bound of {params.config.max_patch_bytes} (config limits.maxPatchBytes)")  # fmt: skip
        if told is not None:  # what was recorded as done was not: only this warning
            told = told._replace(mutated=False, applied=(), reasons=(reasons.POD_LEFT_UNCHANGED,))
        return ReviewResult.left_unchanged("unsupported", uid, why, namespace, name, launcher, told)
    return ReviewResult.of(uid, encoded, result, namespace, name, told)
