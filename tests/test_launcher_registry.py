"""One registry of launchers: each adapter declares its identity once (app.core.launchers), and
every other table that knows launchers is held to it here, both ways: a launcher added to the
adapters without its preview, its e2e job or its controller fails here, and so does a table
that names a launcher the adapters do not know."""

from __future__ import annotations

from pathlib import Path

from app.core import launchers
from app.e2e import jobs as e2e_jobs
from app.events import KINDS
from app.preview import controllers

ROOT = Path(__file__).resolve().parents[1]
# Kinds the preview expands that own no launcher's pods: a bare pod, and a Deployment (its pods
# are its ReplicaSet's, which the plain-pod launcher declares).
PREVIEW_ONLY = {("", "Pod"), ("apps", "Deployment")}
# Controllers the cluster tier installs that launch nothing of their own.
NOT_LAUNCHERS = {"kueue"}


def test_names_and_kinds_are_unique() -> None:
    names = [ln.name for ln in launchers.LAUNCHERS]
    assert len(names) == len(set(names))
    kinds = [(k.group, k.kind) for ln in launchers.LAUNCHERS for k in ln.kinds]
    assert len(kinds) == len(set(kinds)) and kinds
    assert all(k.plural == k.plural.lower() and k.plural.endswith("s") for ln in launchers.LAUNCHERS for k in ln.kinds)


def test_events_are_recorded_on_the_launchers_kinds() -> None:
    assert {(k.group, k.kind): k.plural for ln in launchers.LAUNCHERS for k in ln.kinds} == KINDS


def test_the_preview_expands_every_launchers_kind_and_nothing_unknown() -> None:
    expanded = {*controllers.EXPANDERS, controllers.TRAINJOB}
    assert expanded - PREVIEW_ONLY == set(KINDS)
    assert expanded >= PREVIEW_ONLY


def test_every_launcher_but_the_plain_pod_has_an_e2e_job_of_its_kind() -> None:
    for ln in launchers.LAUNCHERS:
        if ln.name == "pod" or ln.name == "mpijob":  # no torchrun job shape: a plain pod; mpirun
            assert ln.name not in e2e_jobs.LAUNCHERS
            continue
        shape = e2e_jobs.LAUNCHERS[ln.name]
        objects = e2e_jobs.manifests(ln.name, e2e_jobs.Params(namespace="e2e", image="img"))
        job = next(m for m in objects if m["kind"] == shape.kind)
        assert job["apiVersion"] == shape.api_version and shape.api_version.startswith(ln.kinds[0].group)
        # The container the e2e runner reads logs from is in every pod the launcher makes (the
        # preview's expansion of the job) and is the one that training runs in.
        pods = [pod for ex in controllers.expand(objects, "e2e") for pod in ex.pods]
        assert pods and all(launchers.describe(pod, 29500).launcher == ln.name for pod in pods)
        for pod in pods:
            assert shape.training_container in [c["name"] for c in pod["spec"]["containers"]], ln.name
    assert set(e2e_jobs.LAUNCHERS) <= set(launchers.BY_NAME)


def test_training_only_launchers_name_no_container_they_do_not_create() -> None:
    assert {"volcano", "pytorchjob", "trainjob", "jobset", "lws"} == launchers.TRAINING_LAUNCHERS
    for ln in launchers.LAUNCHERS:
        assert ln.container == "" or ln.training_only, ln.name


def test_every_launcher_controller_is_pinned_for_the_cluster_tier_and_every_pin_is_one() -> None:
    rows = [line.split() for line in (ROOT / "scripts/testenv/launchers.pins").read_text().splitlines()]
    pinned = {row[0] for row in rows if row and not row[0].startswith("#")}
    wanted = {ln.controller for ln in launchers.LAUNCHERS if ln.controller}
    assert wanted <= pinned
    assert pinned - wanted == NOT_LAUNCHERS
