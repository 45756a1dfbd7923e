"""The fabric watch's pure core: the pairing schedule, a sweep's verdict, the node condition,
the published report read as untrusted input, and one round's writes against a fake API server
and a scripted fabric (the real ones: tests/cluster/test_fabricwatch.py)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from typing import Any

import pytest

from app.fleet import agent
from app.fleet import condition as cond
from app.fleet import report as rep
from app.fleet.schedule import Schedule, round_of

T0 = dt.datetime(2026, 12, 7, 9, 0, tzinfo=dt.UTC)


# ------------------------------------------------------------------------------ the schedule
@pytest.mark.parametrize("n", [*range(1, 24), 37, 64, 101])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_every_pair_is_probed_from_both_ends_within_the_bound(n: int, k: int) -> None:
    nodes = [f"gpu-node-{i}" for i in range(n)]
    s = Schedule(tuple(reversed(nodes)), k)  # any order in: sorted inside
    seen: set[tuple[str, str]] = set()
    for r in range(s.rounds_to_cover):
        for a in nodes:
            peers = s.peers(a, r)
            assert len(peers) <= k and a not in peers
            for b in peers:
                assert a in s.peers(b, r), "a pair is probed from both ends in the same round"
                seen.add((a, b))
    assert seen == {(a, b) for a, b in itertools.permutations(nodes, 2)}
    assert s.rounds_to_cover == (-(-(n + n % 2 - 1) // k) if n > 1 else 0)


def test_one_slot_pairs_every_node_once_and_the_odd_one_waits() -> None:
    s = Schedule(("a", "b", "c", "d", "e"), 1)
    for slot in range(s.slots):
        partners = {n: s.partner_in_slot(n, slot) for n in s.nodes}
        assert sum(p is None for p in partners.values()) == 1  # the bye
        assert all(partners[p] == n for n, p in partners.items() if p is not None)


def test_ten_thousand_nodes_one_node_meets_all_others_once_in_a_cycle() -> None:
    nodes = tuple(f"n{i:05d}" for i in range(10_000))
    s = Schedule(nodes, 1)
    met = [s.partner_in_slot("n04242", t) for t in range(s.slots)]
    assert len(met) == 9_999 and len(set(met)) == 9_999 and None not in met


def test_a_node_not_in_the_fleet_probes_nothing_and_a_bad_k_is_refused() -> None:
    assert Schedule(("a", "b"), 1).peers("z", 0) == []
    assert Schedule(("a",), 1).peers("a", 3) == []
    with pytest.raises(ValueError, match="at least 1"):
        Schedule(("a", "b"), 0)


@pytest.mark.parametrize("peers", range(1, 9))
def test_a_round_by_hand_probes_every_peer_given_whatever_the_rounds_number(peers: int) -> None:
    """`fabric-watch --once --peer ...` (the rendezvous tier's silent-drop test, an operator on a
    node): with an even number of peers, as many slots as peers missed one of them in the rounds
    holding the bye (the test failed by the wall clock)."""
    from app.cli.fabricwatch import by_hand_per_round

    nodes = ("me", *(f"peer-{i}" for i in range(peers)))
    schedule = Schedule(nodes, by_hand_per_round(peers, 2))
    assert all(sorted(schedule.peers("me", r)) == sorted(nodes[1:]) for r in range(200))


def test_every_agent_agrees_on_the_round_from_the_clock() -> None:
    assert round_of(T0.timestamp(), 60) == round_of(T0.timestamp() + 59.9, 60) == int(T0.timestamp()) // 60
    assert round_of(T0.timestamp() + 60, 60) == round_of(T0.timestamp(), 60) + 1


# ------------------------------------------------------------------------------- the verdict
def path(peer: str = "gpu-node-7", crossed: tuple[int, ...] = (512, 1280, 1500), lost: int = 4200,
         error: str = "", address: str = "10.0.3.7") -> cond.PathResult:  # fmt: skip
    return cond.PathResult(peer, address, "rdma0", crossed, lost, 9000, error)


def test_the_issues_message_for_a_silent_large_frame_drop() -> None:
    p = path()
    assert p.verdict == "dropped"
    assert p.text() == "packets of up to 1500 B cross to gpu-node-7 (10.0.3.7 on rdma0), 4200 B do not"


def test_a_peer_that_answers_nothing_is_unreachable_not_dropping_large_frames() -> None:
    p = path(crossed=(), lost=512)
    assert p.verdict == "unreachable"
    c = cond.judge([], [p], rdma=True, mtu=9000)
    assert (c.status, c.reason) == ("True", cond.PEER_UNREACHABLE)
    assert "large" not in c.message and "gpu-node-7" in c.message
    assert not c.taints, "a peer that is down must not taint its prober"


def test_every_size_crossing_is_healthy_and_says_up_to_which_size() -> None:
    c = cond.judge([], [path(crossed=(512, 1500, 9000), lost=0)], rdma=True, mtu=9000)
    assert (c.status, c.reason) == ("False", cond.HEALTHY)
    assert "9000 B" in c.message


def test_no_raw_socket_is_unknown_not_healthy() -> None:
    c = cond.judge([], [path(crossed=(), lost=0, error="no raw socket for ICMP (needs CAP_NET_RAW)")],
                   rdma=True)  # fmt: skip
    assert (c.status, c.reason) == ("Unknown", cond.PROBE_FAILED) and "CAP_NET_RAW" in c.message


def test_a_drop_outranks_an_unreachable_peer_and_names_the_others() -> None:
    paths = [path("b", crossed=(), lost=512), path("a"), path("c"), path("d", crossed=(512,), lost=1280)]
    c = cond.judge([], paths, rdma=True, mtu=9000)
    assert c.reason == cond.LARGE_FRAMES_DROPPED
    assert c.message.startswith("packets of up to 1500 B cross to a (")
    assert c.message.endswith("also 2 more: c, d")
    assert c.taints


def test_a_local_failure_outranks_the_paths() -> None:
    local = [cond.LocalFinding("ports", True, "15 of 16 selected ports ACTIVE; not active: mlx5_3:1 (1: DOWN)"),
             cond.LocalFinding("memlock", True, "memlock limit 64 KiB")]  # fmt: skip
    c = cond.judge(local, [path()], rdma=True)
    assert (c.status, c.reason) == ("True", cond.RDMA_PORT_DOWN) and "mlx5_3:1" in c.message


def test_the_agents_own_memlock_and_shm_are_not_the_nodes_problem() -> None:
    local = [cond.LocalFinding("memlock", True, "x"), cond.LocalFinding("shm", True, "y")]
    assert cond.judge(local, [], rdma=True).status == "False"


def test_mtu_against_the_fleet() -> None:
    c = cond.judge([], [], rdma=True, mtu=1500, fleet_mtu=9000, netdev="rdma0")
    assert (c.reason, c.status) == (cond.MTU_MISMATCH, "True") and "rdma0 has MTU 1500" in c.message
    assert cond.fleet_mtu([9000, 9000, 1500]) == 9000 and cond.fleet_mtu([4200, 9000]) == 9000
    assert cond.fleet_mtu([]) == 0


def test_a_node_without_rdma_devices_says_so_and_stays_the_same_round_after_round() -> None:
    first = cond.judge([], [path(crossed=(512, 1500), lost=0)], rdma=False, mtu=1500)
    later = cond.judge([], [path("z", crossed=(512, 1500), lost=0)], rdma=False, mtu=1500)
    assert (first.status, first.reason) == ("False", cond.NO_RDMA_DEVICES)
    assert first == later, "the message must not change with the peers rotated through"


def test_the_message_is_one_bounded_line() -> None:
    weird = cond.LocalFinding("gid", True, "line one\nline two " + "x" * 5000)
    c = cond.judge([weird], [], rdma=True)
    assert "\n" not in c.message and len(c.message) <= cond.MESSAGE_MAX


def test_every_reason_is_camel_case_and_listed() -> None:
    assert len(set(cond.REASONS)) == len(cond.REASONS)
    for r in cond.REASONS:
        assert r[0].isupper() and r.isalnum()
    assert set(cond.REASONS) >= cond.TAINTING


# ---------------------------------------------------------------------- condition on the Node
def node(name: str, *, report: str | None = None, ready: bool = True, ours: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None) -> dict[str, Any]:  # fmt: skip
    conditions: list[dict[str, str]] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if ours:
        conditions.append(ours)
    annotations = {rep.ANNOTATION: report} if report is not None else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"taints": taints or []},
            "status": {"conditions": conditions}}  # fmt: skip


def test_the_condition_round_trips_and_staleness_is_three_heartbeats() -> None:
    c = cond.Condition("True", cond.LARGE_FRAMES_DROPPED, "m")
    raw = cond.as_node_condition(c, T0, T0 - dt.timedelta(hours=1))
    assert raw["lastHeartbeatTime"] == "2026-12-07T09:00:00Z"
    found = cond.read_condition(node("a", ours=raw))
    assert found == (c, T0, T0 - dt.timedelta(hours=1))
    assert not cond.stale(T0, 300, T0 + dt.timedelta(seconds=900))
    assert cond.stale(T0, 300, T0 + dt.timedelta(seconds=901))
    assert cond.stale(None, 300, T0), "no heartbeat at all is stale, never healthy"
    assert cond.read_condition(node("a")) is None


# ---------------------------------------------------------------------- the published report
def good_report(ip: str = "10.0.3.7", mtu: int = 9000) -> str:
    return rep.Report((rep.Netdev("rdma0", ip, mtu),), True, 60, 300).to_annotation()


def test_the_report_round_trips() -> None:
    r = rep.parse(good_report())
    assert r.netdevs == (rep.Netdev("rdma0", "10.0.3.7", 9000),) and r.rdma and r.heartbeat_seconds == 300


@pytest.mark.parametrize("address", ["127.0.0.1", "169.254.1.1", "224.0.0.1", "0.0.0.0", "240.0.0.1", "fe80::1",
                                     "10.0.3.7; rm -rf /", "gpu-node-7", "10.0.0.1"])  # fmt: skip
def test_an_address_that_cannot_be_a_peers_is_left_out_with_why(address: str) -> None:
    text = json.dumps({"v": 1, "rdma": True, "interval": 60, "heartbeat": 300,
                       "netdevs": [{"name": "rdma0", "ip": address, "mtu": 9000}]})  # fmt: skip
    r = rep.parse(text, own=frozenset({"10.0.0.1"}))
    assert r.netdevs == () and len(r.dropped) == 1 and "rdma0" in r.dropped[0]


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"), ("[]", "not a version 1"), ('{"v": 2}', "not a version 1"),
    ('{"v": 1, "rdma": true, "interval": 60}', "required"),
    ('{"v": 1, "rdma": true, "interval": 0, "heartbeat": 300, "netdevs": []}', "1 to 86400"),
    ('{"v": 1, "rdma": true, "interval": 60, "heartbeat": 300, "netdevs": {}}', "must be a list"),
    ("x" * 5000, "over 4096"),
])  # fmt: skip
def test_an_unreadable_report_is_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(rep.ReportError, match=message):
        rep.parse(text)


def test_bad_netdev_names_and_mtus_and_too_many_entries() -> None:
    entries = [{"name": "a" * 16, "ip": "10.0.0.2", "mtu": 9000}, {"name": "rdma1", "ip": "10.0.0.3", "mtu": 70000},
               "x"] + [{"name": f"r{i}", "ip": f"10.1.0.{i + 1}", "mtu": 9000} for i in range(40)]  # fmt: skip
    r = rep.parse(json.dumps({"v": 1, "rdma": True, "interval": 60, "heartbeat": 300, "netdevs": entries}))
    assert len(r.netdevs) == rep.MAX_NETDEVS - 3
    assert any("not an interface name" in d for d in r.dropped) and any("out of range" in d for d in r.dropped)
    assert any("left out" in d for d in r.dropped)


def test_the_fleet_is_the_ready_reporting_nodes_with_a_live_agent() -> None:
    fresh = cond.as_node_condition(cond.Condition("False", cond.HEALTHY, "ok"), T0, T0)
    old = cond.as_node_condition(cond.Condition("False", cond.HEALTHY, "ok"), T0 - dt.timedelta(hours=1), T0)
    nodes = [node("me", report=good_report("10.0.0.1")), node("b", report=good_report("10.0.0.2"), ours=fresh),
             node("c", report=good_report("10.0.0.3"), ready=False), node("d", report=good_report("10.0.0.4"), ours=old),
             node("e"), node("f", report="{"), node("g", report=good_report("10.0.0.7"))]  # fmt: skip
    peers, left_out = agent.fleet(nodes, "me", frozenset(), T0)
    assert [p.name for p in peers] == ["b", "g"]
    assert sorted(w.split(":")[0] for w in left_out) == ["c", "d", "f"]


def test_targets_follow_the_rails_and_the_smaller_mtu_and_are_bounded() -> None:
    peer = rep.Peer("b", rep.Report((rep.Netdev("rdma1", "10.0.1.2", 4200), rep.Netdev("rdma0", "10.0.0.2", 9000)),
                                    True, 60, 300))  # fmt: skip
    local = (rep.Netdev("rdma0", "10.0.0.1", 9000), rep.Netdev("rdma1", "10.0.1.1", 9000),
             rep.Netdev("rdma2", "10.0.2.1", 9000))  # fmt: skip
    got = agent.targets([peer], local, 10)
    assert got == [agent.Target("b", "10.0.0.2", "rdma0", 9000), agent.Target("b", "10.0.1.2", "rdma1", 4200),
                   agent.Target("b", "10.0.1.2", "rdma2", 4200)]  # fmt: skip
    assert len(agent.targets([peer] * 5, local, 4)) == 4


# -------------------------------------------------------------------------- the writes planned
S = agent.Settings("me", interval_seconds=60, heartbeat_seconds=300, taint=True)
BAD = cond.Condition("True", cond.LARGE_FRAMES_DROPPED, "m")
GOOD = cond.Condition("False", cond.HEALTHY, "ok")


def test_an_unchanged_condition_is_written_only_at_the_heartbeat() -> None:
    w = agent.Written(GOOD, T0, T0, "r", False)
    assert agent.plan(w, GOOD, "r", T0 + dt.timedelta(seconds=299), S) == agent.Plan(False, False, False, None)
    assert agent.plan(w, GOOD, "r", T0 + dt.timedelta(seconds=300), S) == agent.Plan(True, False, False, None)


def test_a_change_writes_sends_an_event_and_taints_when_tainting_is_on() -> None:
    w = agent.Written(GOOD, T0, T0, "r", False)
    assert agent.plan(w, BAD, "r", T0, S) == agent.Plan(True, True, False, True)
    assert agent.plan(w, BAD, "r", T0, agent.Settings("me", taint=False)).taint is None
    healed = agent.Written(BAD, T0, T0, "r", True)
    assert agent.plan(healed, GOOD, "r2", T0, S) == agent.Plan(True, True, True, False)


def test_the_taint_is_never_removed_blind_and_turning_tainting_off_removes_ours() -> None:
    assert agent.plan(agent.Written(), GOOD, "r", T0, S).taint is None
    assert agent.plan(agent.Written(BAD, T0, T0, "r", True), BAD, "r", T0, agent.Settings("me")).taint is False


@pytest.mark.parametrize("kwargs, message", [({"interval_seconds": 1}, "interval"),
                                             ({"heartbeat_seconds": 30}, "heartbeat"),
                                             ({"peers_per_round": 0}, "peers per round")])  # fmt: skip
def test_bad_settings_are_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        agent.Settings("me", **kwargs)


# ------------------------------------------------------------ rounds against a fake API server
class FakeApi:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes_ = {n["metadata"]["name"]: n for n in nodes}
        self.calls: list[tuple[str, ...]] = []
        self.down = False
        self.count_reads = False

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("connection refused")

    def members(self) -> list[str]:
        self._check()
        return [n for n, node in self.nodes_.items() if rep.ANNOTATION in node["metadata"]["annotations"]]

    def node(self, name: str) -> dict[str, Any] | None:
        self._check()
        self.calls.append(("get", name)) if self.count_reads else None
        return self.nodes_.get(name)

    def write_condition(self, name: str, c: dict[str, str]) -> None:
        self._check()
        conds = [x for x in self.nodes_[name]["status"]["conditions"] if x["type"] != c["type"]]
        self.nodes_[name]["status"]["conditions"] = [*conds, c]
        self.calls.append(("condition", c["status"], c["reason"]))

    def write_report(self, name: str, annotation: str) -> None:
        self._check()
        self.nodes_[name]["metadata"]["annotations"][rep.ANNOTATION] = annotation
        self.calls.append(("report",))

    def set_taint(self, name: str, on: bool, key: str) -> None:
        self._check()
        self.calls.append(("taint", str(on)))

    def event(self, name: str, kind: str, reason: str, message: str) -> None:
        self._check()
        self.calls.append(("event", kind, reason))


class Fabric:
    """Scripted paths: the peers whose large frames are dropped, those that answer nothing."""

    def __init__(self) -> None:
        self.dropping: set[str] = set()
        self.dead: set[str] = set()
        self.probed: list[list[str]] = []

    def probe(self, todo: list[agent.Target]) -> list[cond.PathResult]:
        self.probed.append([t.peer for t in todo])
        out = []
        for t in todo:
            if t.peer in self.dead:
                out.append(cond.PathResult(t.peer, t.address, t.netdev, (), 512, t.limit))
            elif t.peer in self.dropping:
                out.append(cond.PathResult(t.peer, t.address, t.netdev, (512, 1280, 1500), 1517, t.limit))
            else:
                out.append(cond.PathResult(t.peer, t.address, t.netdev, (512, 1500, 9000), 0, t.limit))
        return out


def local() -> agent.Local:
    return agent.Local((cond.LocalFinding("ports", False, "16 of 16 ports ACTIVE"),),
                       (rep.Netdev("rdma0", "10.0.0.1", 9000),), True)  # fmt: skip


def fleet_of(n: int) -> list[dict[str, Any]]:
    return [node("me")] + [node(f"p{i}", report=good_report(f"10.0.0.{i + 2}")) for i in range(n)]


def test_a_drop_turns_the_condition_true_once_and_healing_clears_it() -> None:
    api, fabric = FakeApi(fleet_of(3)), Fabric()
    a = agent.Agent(api, agent.Settings("me", peers_per_round=3, taint=True), local, fabric.probe)
    assert a.round(T0).condition.reason == cond.HEALTHY
    assert ("event", "Normal", cond.HEALTHY) in api.calls and ("report",) in api.calls
    api.calls.clear()
    fabric.dropping.add("p1")
    out = a.round(T0 + dt.timedelta(seconds=60))
    assert out.condition.reason == cond.LARGE_FRAMES_DROPPED
    assert out.condition.message == ("packets of up to 1500 B cross to p1 (10.0.0.3 on rdma0), 1517 B do not")
    assert api.calls == [("condition", "True", cond.LARGE_FRAMES_DROPPED),
                         ("event", "Warning", cond.LARGE_FRAMES_DROPPED), ("taint", "True")]  # fmt: skip
    api.calls.clear()
    a.round(T0 + dt.timedelta(seconds=120))
    assert api.calls == [], "nothing is written while nothing changes"
    fabric.dropping.clear()
    assert a.round(T0 + dt.timedelta(seconds=180)).condition.reason == cond.HEALTHY
    assert ("taint", "False") in api.calls and ("event", "Normal", cond.HEALTHY) in api.calls


def test_the_condition_stays_true_while_the_rotation_moves_on_and_the_bad_peer_is_probed_again() -> None:
    api, fabric = FakeApi(fleet_of(9)), Fabric()
    fabric.dropping.add("p4")
    a = agent.Agent(api, agent.Settings("me", peers_per_round=1), local, fabric.probe)
    now, found_at = T0, None
    for r in range(12):
        out = a.round(now + dt.timedelta(seconds=60 * r))
        if found_at is None and out.condition.reason == cond.LARGE_FRAMES_DROPPED:
            found_at = r
        if found_at is not None:
            assert out.condition.reason == cond.LARGE_FRAMES_DROPPED, f"flipped back in round {r}"
    assert found_at is not None and found_at < 10  # 10 nodes, 1 peer a round: 9 rounds cover every pair
    assert all("p4" in probed for probed in fabric.probed[found_at + 1 :]), "a bad peer is probed every round"
    assert sum(1 for c in api.calls if c[0] == "event") == 2  # healthy at start, then the drop


def test_a_dead_peer_does_not_taint_and_a_not_ready_one_is_not_probed() -> None:
    nodes = fleet_of(2)
    nodes[2]["status"]["conditions"][0]["status"] = "False"  # p1 NotReady
    api, fabric = FakeApi(nodes), Fabric()
    fabric.dead.add("p0")
    a = agent.Agent(api, agent.Settings("me", peers_per_round=3, taint=True), local, fabric.probe)
    out = a.round(T0)
    assert out.condition.reason == cond.PEER_UNREACHABLE
    assert fabric.probed == [["p0"]] and not any(c[0] == "taint" for c in api.calls)


def test_an_api_server_outage_keeps_probing_and_writes_when_it_is_back() -> None:
    api, fabric = FakeApi(fleet_of(2)), Fabric()
    a = agent.Agent(api, agent.Settings("me", peers_per_round=3), local, fabric.probe)
    a.round(T0)
    api.down = True
    fabric.dropping.add("p0")
    out = a.round(T0 + dt.timedelta(seconds=60))
    assert out.condition.reason == cond.LARGE_FRAMES_DROPPED and out.api_errors
    assert sorted(fabric.probed[-1]) == ["p0", "p1"], "the last fleet known is probed while the API server is away"
    api.down = False
    api.calls.clear()
    a.round(T0 + dt.timedelta(seconds=120))
    assert ("condition", "True", cond.LARGE_FRAMES_DROPPED) in api.calls


def test_a_restarted_agent_picks_up_its_condition_without_a_new_event() -> None:
    api, fabric = FakeApi(fleet_of(2)), Fabric()
    fabric.dropping.add("p0")
    agent.Agent(api, agent.Settings("me", peers_per_round=3, taint=True), local, fabric.probe).round(T0)
    api.nodes_["me"]["spec"]["taints"] = [{"key": cond.TAINT_KEY, "effect": "NoSchedule"}]
    api.calls.clear()
    again = agent.Agent(api, agent.Settings("me", peers_per_round=3, taint=True), local, fabric.probe)
    again.round(T0 + dt.timedelta(seconds=30))
    assert api.calls == [], "same condition, heartbeat not due, taint already there: nothing written"
    mine = cond.read_condition(api.nodes_["me"])
    assert mine is not None and mine[2] == T0, "the transition time is kept across restarts"


def test_memory_is_one_entry_per_peer_and_forgets_peers_that_left() -> None:
    api, fabric = FakeApi(fleet_of(6)), Fabric()
    a = agent.Agent(api, agent.Settings("me", peers_per_round=2), local, fabric.probe)
    for r in range(20):
        a.round(T0 + dt.timedelta(seconds=60 * r))
        assert len(a.memory.by_peer) <= 6
    del api.nodes_["p3"]
    a.round(T0 + dt.timedelta(seconds=60 * 21))
    assert "p3" not in a.memory.by_peer


def test_a_round_reads_only_the_nodes_it_probes() -> None:
    api, fabric = FakeApi(fleet_of(200)), Fabric()
    fabric.dropping.add("p7")
    a = agent.Agent(api, agent.Settings("me", peers_per_round=2), local, fabric.probe)
    api.count_reads = True
    for r in range(300):
        api.calls.clear()
        a.round(T0 + dt.timedelta(seconds=60 * r))
        reads = [c for c in api.calls if c[0] == "get"]
        assert len(reads) <= 2 * 2 + (1 if r == 0 else 0), reads  # k peers, k bad ones again, our own at start
    assert len(a.seen) <= 4 and set(a.memory.bad()) == {"p7"}


def test_a_node_with_no_interface_to_probe_from_is_unknown_not_healthy() -> None:
    c = cond.judge([], [], rdma=False, can_probe=False)
    assert (c.status, c.reason) == ("Unknown", cond.PROBE_FAILED) and "no interface" in c.message
    alone = cond.judge([], [], rdma=True, mtu=9000)
    assert alone.status == "False" and "no peer to probe yet" in alone.message


# --------------------------------------------------------------------------- doctor --cluster
def test_the_fleet_table_marks_stale_and_missing_agents_and_counts_who_is_named() -> None:
    from app.fleet import table

    def ours(c: cond.Condition, age: int) -> dict[str, str]:
        return cond.as_node_condition(c, T0 - dt.timedelta(seconds=age), T0 - dt.timedelta(hours=2))

    drop = "packets of up to 1500 B cross to gpu-node-7 (10.0.3.7 on rdma0), 1517 B do not"
    nodes = [
        node("gpu-node-1", report=good_report(), ours=ours(cond.Condition("True", cond.LARGE_FRAMES_DROPPED, drop), 30),
             taints=[{"key": cond.TAINT_KEY, "effect": "NoSchedule"}]),
        node("gpu-node-2", report=good_report(), ours=ours(cond.Condition("True", cond.PEER_UNREACHABLE,
             "no ICMP echo of any size answered by gpu-node-7 (10.0.3.7 on rdma0)"), 30)),
        node("gpu-node-7", report=good_report(), ours=ours(cond.Condition("False", cond.HEALTHY, "fine"), 901)),
        node("gpu-node-70", report=good_report(), ours=ours(cond.Condition("False", cond.HEALTHY, "fine"), 10)),
        node("cpu-node-1"),
    ]  # fmt: skip
    rows = {r.node: r for r in table.rows(nodes, T0)}
    assert (rows["gpu-node-1"].state, rows["gpu-node-1"].tainted) == ("DEGRADED", True)
    assert rows["gpu-node-7"].state == "STALE", "an old False is never shown healthy"
    assert (rows["gpu-node-7"].named_by, rows["gpu-node-70"].named_by) == (2, 0)
    assert rows["cpu-node-1"].state == "NO-AGENT" and rows["gpu-node-70"].state == "HEALTHY"
    assert not table.healthy(list(rows.values()))
    text = table.render(table.rows(nodes, T0))
    assert text.splitlines()[0].split() == ["NODE", "STATE", "REASON", "AGE", "TAINT", "NAMED-BY", "MESSAGE"]
    assert "15m" in text and drop in text
    assert table.healthy(table.rows(nodes[3:], T0))


def test_the_scale_simulation_runs_the_real_schedule() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "scripts/fabricwatch_sim.py", "--nodes", "64", "--nodes", "101",
                        "--peers-per-round", "3", "--sample", "200"], capture_output=True, text=True, cwd=root,
                       timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = {line.split("|")[1].strip(): line for line in p.stdout.splitlines() if line.startswith("| ")}
    assert "21 (0.3 h)" in lines["rounds to cover all pairs"] and "34 (0.6 h)" in lines["rounds to cover all pairs"]
    assert "64 nodes met all 63 peers by round 21" in lines["checked"]
    assert "(NPD: 13)" in lines["condition writes/min (fleet)"]
