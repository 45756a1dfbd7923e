"""Events (events.k8s.io/v1) for what the webhook decided, on the job the user created.

Training pods are created by controllers, so the API server hands our admission warnings to the
controller, not to the person who submitted the job; `kubectl describe <job>` shows Events. One
Event per job and reason: `Injected` (what was added, for which launcher) and one per kind of
warning, with a stable reason. A 1,000-pod job makes a handful: the first occurrence creates the
Event, later ones raise its series count, as client-go's recorder does.

Off the admission path: the review makes a small record of bounded size (record.admission),
the server appends it to a queue bounded in records and bytes (queue), and a sender thread
(recorder) gates, aggregates and sends it. Never for dry-run reviews (the webhook declares
sideEffects: NoneOnDryRun), nor for a pod we already mutated (reinvocation would count every pod
twice).

A tenant controls what the reviews say, and anyone who reaches /mutate can send reviews, so the
sender is built to be neither an amplifier nor a pen: Events only in namespaces the webhook's
own selectors admit and only about objects that exist with that uid there (gates), each note our
own sentence with bounded names (record.NOTES), token buckets per namespace and per job and at
most `max_calls` API calls a flush, reads included (limits), a back-off when the API server does
not answer, and a sender thread no error ends. This package does no I/O itself: the sender and
the reads (app.kube) are given.
"""

from app.events.gates import KINDS, Gate, NamespaceGate, ObjectGate, resource_of
from app.events.limits import CallBudget, TokenBuckets
from app.events.queue import AdmissionQueue
from app.events.record import (
    FIELD_MAX,
    MAX_WARNINGS,
    NOTE_MAX,
    NOTES,
    REASONS,
    UID_MAX,
    Admission,
    Occurrence,
    Regarding,
    admission,
    occurrences,
    regarding,
    regarding_of,
    size_of,
)
from app.events.recorder import ACTION, REPORTING_CONTROLLER, Recorder, Sender, Unavailable

__all__ = [
    "ACTION", "FIELD_MAX", "KINDS", "MAX_WARNINGS", "NOTES", "NOTE_MAX", "REASONS",
    "REPORTING_CONTROLLER", "UID_MAX", "Admission", "AdmissionQueue", "CallBudget", "Gate", "NamespaceGate",
    "ObjectGate", "Occurrence", "Recorder", "Regarding", "Sender", "TokenBuckets", "Unavailable", "admission",
    "occurrences", "regarding", "regarding_of", "resource_of", "size_of",
]  # fmt: skip
