"""Why the webhook warns: every admission warning is made with its reason, here, where the core
makes it. The reasons are a contract (the Events' reasons: users filter on them with
`kubectl get events --field-selector reason=NodeCountUnknown`; docs/configuration.md lists
them), so nothing downstream reads a reason back out of a warning's text."""

from __future__ import annotations

from app.wrapper import rules

LEFTOVER_FLAG = "LeftoverFlag"
NODE_COUNT_UNKNOWN = "NodeCountUnknown"
LOOPBACK_ENDPOINT = "LoopbackEndpoint"
ENDPOINT_NAMES_NO_POD = "EndpointNamesNoPod"
TORCHRUN_NOT_WRAPPED = "TorchrunNotWrapped"
SHM_CAPPED = "ShmCappedByMemoryLimit"
PRIVILEGE_KEPT = "PrivilegeKept"
ENV_FROM_OVERRIDDEN = "EnvFromOverridden"
DNS_POLICY_KEPT = "DnsPolicyKept"
MPI_ENV_NOT_FORWARDED = "MPIEnvNotForwarded"
ALLOCATOR_ASSUMED = "AllocatorAssumed"
POD_LEFT_UNCHANGED = "PodLeftUnchanged"
ANNOTATION_IGNORED = "AnnotationIgnored"
# A rendezvous setting that cannot work, of a kind none of the above names (is_host against the
# endpoint, --master-addr on the wrong rank): the wrapper refuses it at start.
RENDEZVOUS_REFUSED = "RendezvousRefused"
# What else breaks on the host network (app/core/hazards.py): sshd on the node's port 22, Multus
# attachments no CNI makes, DRA NIC claims a host-network pod cannot take.
SSHD_ON_NODE_PORT = "SshdOnNodePort"
MULTUS_ON_HOST_NETWORK = "MultusOnHostNetwork"
DRA_CLAIM_ON_HOST_NETWORK = "DRAClaimOnHostNetwork"
# Any other warning (a command too long to read at admission).
GENERAL = "Warning"

REASONS = (
    LEFTOVER_FLAG, NODE_COUNT_UNKNOWN, LOOPBACK_ENDPOINT, ENDPOINT_NAMES_NO_POD, TORCHRUN_NOT_WRAPPED, SHM_CAPPED,
    PRIVILEGE_KEPT, ENV_FROM_OVERRIDDEN, DNS_POLICY_KEPT, MPI_ENV_NOT_FORWARDED, ALLOCATOR_ASSUMED,
    POD_LEFT_UNCHANGED, ANNOTATION_IGNORED, RENDEZVOUS_REFUSED, SSHD_ON_NODE_PORT, MULTUS_ON_HOST_NETWORK,
    DRA_CLAIM_ON_HOST_NETWORK, GENERAL,
)  # fmt: skip

# The rules' refusals (rules.Plan.fatal_kind, named in the wrapper, which has no core) -> reason.
_REFUSALS = {
    rules.REFUSE_NNODES: NODE_COUNT_UNKNOWN,
    rules.REFUSE_LOOPBACK: LOOPBACK_ENDPOINT,
    rules.REFUSE_LOCAL_ADDR: LEFTOVER_FLAG,
    rules.REFUSE_NO_POD: ENDPOINT_NAMES_NO_POD,
    rules.REFUSE_RENDEZVOUS: RENDEZVOUS_REFUSED,
}


def of_refusal(kind: str) -> str:
    """The reason of a refusal the rules made (rules.Plan.fatal_kind)."""
    return _REFUSALS.get(kind, RENDEZVOUS_REFUSED)


class Warned:
    """One admission warning: its reason (the Event's), the text the pod's creator reads (the
    admission response, `explain`, the status annotation), and whether it keeps the job from
    training together (`fatal`: the status annotation's `problems`). `refusal`: for a fatal one
    the wrapper's own refusal, which the preview shows as the pod's."""

    __slots__ = ("fatal", "reason", "refusal", "text")

    def __init__(self, reason: str, text: str, fatal: bool = False, refusal: str = "") -> None:
        self.reason = reason
        self.text = text
        self.fatal = fatal
        self.refusal = refusal

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Warned) and (self.reason, self.text, self.fatal) == (
            other.reason,
            other.text,
            other.fatal,
        )

    def __hash__(self) -> int:
        return hash((self.reason, self.text, self.fatal))

    def __repr__(self) -> str:
        return f"Warned({self.reason!r}, {self.text!r}{', fatal' if self.fatal else ''})"
