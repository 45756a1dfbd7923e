"""Launcher adapters, tried in order; the first that detects the pod describes it."""

from __future__ import annotations

from app.core.launchers.base import Kind, Launcher, LauncherInfo, Pod
from app.core.launchers.generic import IndexedJob, PlainPod, StatefulSet
from app.core.launchers.jobset import JobSet, TrainJob
from app.core.launchers.lws import LeaderWorkerSet
from app.core.launchers.mpijob import MPIJob
from app.core.launchers.pytorchjob import PyTorchJob
from app.core.launchers.volcano import Volcano

# Specific before generic: Trainer v2 pods are JobSet pods, JobSet pods are Job pods,
# LWS pods are StatefulSet pods.
LAUNCHERS: tuple[Launcher, ...] = (
    Volcano(),
    PyTorchJob(),
    TrainJob(),
    JobSet(),
    LeaderWorkerSet(),
    MPIJob(),  # before IndexedJob: its launcher is a Job's pod
    IndexedJob(),
    StatefulSet(),
    PlainPod(),
)


# What the other tables read of the adapters (docs/development.md, "Adding a launcher").
BY_NAME: dict[str, Launcher] = {launcher.name: launcher for launcher in LAUNCHERS}
# Launchers that run nothing but training jobs: their pods are training pods whatever they run.
TRAINING_LAUNCHERS: frozenset[str] = frozenset(launcher.name for launcher in LAUNCHERS if launcher.training_only)
# (API group, kind) -> plural of every kind whose controller makes a launcher's pods.
KINDS: dict[tuple[str, str], str] = {(k.group, k.kind): k.plural for launcher in LAUNCHERS for k in launcher.kinds}


def describe(pod: Pod, rdzv_port: int) -> LauncherInfo:
    for launcher in LAUNCHERS:
        if launcher.detect(pod):
            return launcher.describe(pod, rdzv_port)
    raise AssertionError("PlainPod always detects")  # pragma: no cover


__all__ = ["BY_NAME", "KINDS", "LAUNCHERS", "TRAINING_LAUNCHERS", "Kind", "Launcher", "LauncherInfo", "describe"]
