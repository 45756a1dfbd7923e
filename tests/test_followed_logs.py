"""The launcher tier's reading of followed logs (tests/cluster/followed.py). The case that failed
CI at stop 43: a LeaderWorkerSet group outside the webhook trains alone in each pod, the pods exit
0, LWS restarts them, and the leader's logs held two runs before the worker's first one ended; a
count over a name's whole logs then never equalled the ranks of one run."""

from tests.cluster.followed import again, ddp_ok, first_finished_run, runs, trained_alone


def ranks(world: int, nproc: int) -> str:
    return "".join(f"DDP-OK rank={r} world={world} sum={world * (world + 1) // 2} host=node1 master=x\n"
                   for r in range(nproc))  # fmt: skip


def test_a_name_s_logs_split_into_runs_at_the_marker() -> None:
    text = "start\n" + ranks(2, 2) + again("ddp-lws-0", "u-2", 1) + "start\n" + ranks(2, 1)
    assert runs(text) == ["start\n" + ranks(2, 2), "start\n" + ranks(2, 1)]
    assert ddp_ok(text, 2) == 3  # over the whole logs: more than one run's ranks
    # Only the marker splits: a line that merely starts the same way stays in its run.
    assert len(runs("--- a note ---\n" + ranks(2, 2))) == 1


def test_each_pod_trained_alone_even_after_restarts() -> None:
    leader = ranks(2, 2) + again("ddp-lws-0", "u-1", 1) + ranks(2, 2)  # two runs by now
    worker = "loading\n" + ranks(2, 2)
    assert trained_alone({"ddp-lws-0": leader, "ddp-lws-0-1": worker}, 2)


def test_not_alone_until_two_pods_each_finished_a_whole_run() -> None:
    # The worker's run is half-printed; an earlier partial run and a later one do not add up.
    worker = ranks(2, 1) + again("ddp-lws-0-1", "u-3", 0) + ranks(2, 1)
    assert not trained_alone({"ddp-lws-0": ranks(2, 2), "ddp-lws-0-1": worker}, 2)
    assert not trained_alone({"ddp-lws-0": ranks(2, 2)}, 2)
    # Trained together (world 4 across both pods): not alone.
    assert not trained_alone({"ddp-lws-0": ranks(4, 2), "ddp-lws-0-1": ranks(4, 2)}, 2)


def test_the_first_finished_run_is_the_one_read() -> None:
    first = "hostnet-rdma: launcher=lws is_host=true\n" + ranks(4, 2)
    text = "crashed\n" + again("ddp-lws-0", "u-1", 1) + first + again("ddp-lws-0", "u-2", 0) + ranks(4, 2)
    assert first_finished_run(text, 4) == first
    assert first_finished_run(text, 2) is None
