"""What one review may cost, and the bounds that keep it there: one home for each (docs/security.md,
"Review cost"). A tenant controls every byte of a pod; anyone who reaches the Service controls
every byte of a review. Each input is bounded where it enters, so the review's cost is linear in
the body (itself at most the server's max body, 7 MiB) with a small constant, whatever it holds.

A pod the core cannot handle within these bounds is allowed unchanged with a warning, or handled
as far as it can be with what is unknown left to the wrapper at run time (which reads the
container's real argv and env, and runs in the tenant's own pod, on the tenant's own CPU).
"""

from __future__ import annotations

# The budget the adversarial tests hold every review to (tests/test_tenant_cost.py and
# tests/test_properties.py, through the compiled core): CPU seconds and the rise of resident
# memory at its peak, a fixed part plus a part per byte of the body (parsing a 7 MiB review is
# itself ~50 ms and ~6x its bytes: a pod of many short strings).
REVIEW_CPU_SECONDS = 0.25
REVIEW_CPU_PER_MIB = 0.1
REVIEW_MEMORY_BYTES = 32 << 20
REVIEW_MEMORY_PER_BODY_BYTE = 12

# `$(VAR)` references in a container's env are expanded at admission only while the expanded
# values of the container add up to this many bytes (E1=$(E0)$(E0), ... doubles at each entry:
# 29 entries were 1 GiB). Past it a value reads as unknown, as one from valueFrom does: the
# kubelet expands it at run time, and the wrapper reads it there.
ENV_EXPANDED_BYTES = 64 << 10

# A command (argv, or an `sh -c` script) over this many bytes is not analysed at admission:
# splitting and parsing it is linear but interpreted, on the one event loop every review shares.
# The wrapper still decides at run time; admission only cannot warn.
ANALYSED_COMMAND_BYTES = 64 << 10

# The commands read for an sshd at admission (app/core/hazards.py: the host network's port 22),
# all of a pod's containers together: the split is interpreted, and each container may hold a
# script of ANALYSED_COMMAND_BYTES. Past it a command is not read for sshd (no warning).
SSHD_READ_BYTES = 64 << 10

# A name taken from the pod (a job name from a label, an annotation or an owner reference) is
# used in the rendezvous defaults and peer patterns only when it is a DNS subdomain of at most
# this length (what the API server allows for object names); anything else names no pod.
NAME_BYTES = 253

# The status annotation hostnet-rdma.io/injected: each problem cut to PROBLEM_BYTES, at most
# MAX_PROBLEMS of them, the whole at most STATUS_BYTES.
STATUS_BYTES = 4096
PROBLEM_BYTES = 512
MAX_PROBLEMS = 4

# The API server's limit on all of a pod's annotations together (keys and values): a patch that
# would take them over it fails pod creation, so the pod is left unchanged instead.
ANNOTATIONS_BYTES = 256 << 10
