#!/usr/bin/env python3
"""The fabric watch's cost at fleet scale, on paper and by running its real pairing schedule
(app.fleet.schedule): rounds to cover every pair, packets and bytes per node per minute, API
calls per minute, against Node Problem Detector's writes. Pure and fast (a few seconds):

    python3 scripts/fabricwatch_sim.py            # the table in docs/fabric-watch.md
    python3 scripts/fabricwatch_sim.py --nodes 2048 --peers-per-round 4 --rails 8

What it counts, per round and node (docs/fabric-watch.md says why each):
- sweeps: k peers x R rails, each from this node and, symmetrically, from each partner to it;
- a healthy sweep sends one ICMP echo per size (pathprobe.SIZES up to the MTU) and gets one reply;
  a sweep over a silent drop sends up to 2 tries of the first lost size and 5 bisection steps;
- API: the condition written on change, else once a heartbeat (NPD: the same, its
  --k8s-exporter-heartbeat-period defaults to 5m); k GETs of the peers it probes; the
  fleet from one EndpointSlice watch (deltas only).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.fleet.schedule import Schedule
from app.wrapper import pathprobe

NPD_HEARTBEAT_SECONDS = 300  # node-problem-detector: --k8s-exporter-heartbeat-period (default 5m)


def sweep_cost(mtu: int, dropped_at: int = 0) -> tuple[int, int]:
    """(echo requests, request bytes) of one sweep up to `mtu`; a drop above `dropped_at` adds
    the second try of the first lost size and the bisection steps."""
    sizes = sorted({s for s in pathprobe.SIZES if s <= mtu} | {mtu})
    if not dropped_at:
        return len(sizes), sum(sizes)
    crossed = [s for s in sizes if s <= dropped_at]
    lost = next(s for s in sizes if s > dropped_at)
    steps = pathprobe.BISECT_STEPS
    return len(crossed) + 2 + steps, sum(crossed) + 2 * lost + steps * (dropped_at + lost) // 2


def verify_coverage(nodes: int, k: int, sample: int, seed: int = 1) -> tuple[int, int]:
    """Run the schedule: (rounds until every pair of `sample` nodes has met every other node,
    the largest number of peers any of them probed in one round)."""
    names = [f"node-{i:05d}" for i in range(nodes)]
    s = Schedule(tuple(names), k)
    rng = random.Random(seed)
    chosen = names if sample >= nodes else rng.sample(names, sample)
    worst_round, most = 0, 0
    for name in chosen:
        met: set[str] = set()
        r = 0
        while len(met) < nodes - 1:
            peers = s.peers(name, r)
            most = max(most, len(peers))
            met.update(peers)
            r += 1
            if r > s.rounds_to_cover:
                raise AssertionError(f"{name} has not met every node within {s.rounds_to_cover} rounds")
        worst_round = max(worst_round, r)
    return worst_round, most


def row(nodes: int, k: int, rails: int, mtu: int, interval: int, heartbeat: int, sample: int) -> dict[str, str]:
    s = Schedule(tuple(f"n{i}" for i in range(nodes)), k)
    t0 = time.monotonic()
    covered, most = verify_coverage(nodes, k, sample)
    assert covered <= s.rounds_to_cover and most <= k
    per_min = 60 / interval
    requests, req_bytes = sweep_cost(mtu)
    # This node's sweeps (k peers x rails) and its partners' sweeps to it: requests + replies each way.
    packets = 2 * 2 * k * rails * requests * per_min
    bytes_out = 2 * k * rails * req_bytes * per_min  # our requests + our replies to the partners' requests
    writes = nodes * 60 / heartbeat  # steady state: heartbeats (a change adds one write and one Event)
    gets = nodes * k * per_min
    return {
        "nodes": f"{nodes:,}", "peers/round k": str(k), "rails": str(rails),
        "rounds to cover all pairs": f"{s.rounds_to_cover:,} ({s.rounds_to_cover * interval / 3600:.1f} h)",
        "checked": f"{min(sample, nodes):,} nodes met all {nodes - 1:,} peers by round {covered:,} ({time.monotonic() - t0:.1f} s)",
        "probed by, per round": f"{k} peers (a node-wide fault is seen in 1 round)",
        "packets/node/min": f"{packets:,.0f}", "bytes out/node/min": f"{bytes_out / 1e6:.2f} MB ({bytes_out * 8 / 60 / 1e3:.0f} kbit/s)",
        "condition writes/min (fleet)": f"{writes:,.0f} (NPD: {nodes * 60 / NPD_HEARTBEAT_SECONDS:,.0f})",
        "node GETs/min (fleet)": f"{gets:,.0f} ({gets / 60:,.0f}/s)",
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, action="append", help="fleet sizes (default 1000 and 10000)")
    p.add_argument("--peers-per-round", type=int, default=2)
    p.add_argument("--rails", type=int, default=8, help="RDMA netdevs per node (default 8: one per GPU)")
    p.add_argument("--mtu", type=int, default=4200, help="RDMA netdev MTU (RoCE: 4200 for a 4096 path MTU)")
    p.add_argument("--interval", type=int, default=60)
    p.add_argument("--heartbeat", type=int, default=300)
    p.add_argument("--sample", type=int, default=200, help="nodes whose full cycle is run (all when fewer)")
    args = p.parse_args()
    rows = [row(n, args.peers_per_round, args.rails, args.mtu, args.interval, args.heartbeat, args.sample)
            for n in args.nodes or [1000, 10000]]  # fmt: skip
    requests, req_bytes = sweep_cost(args.mtu)
    drop_requests, _ = sweep_cost(args.mtu, 1500)
    print(
        f"one sweep up to {args.mtu} B: {requests} echoes, {req_bytes:,} B of requests; over a silent drop above "
        f"1500 B: {drop_requests} echoes; interval {args.interval} s, heartbeat {args.heartbeat} s\n"
    )
    keys = list(rows[0])
    print("| " + " | ".join(["", *(r["nodes"] + " nodes" for r in rows)]) + " |")
    print("|" + "---|" * (len(rows) + 1))
    for key in keys[1:]:
        print("| " + " | ".join([key, *(r[key] for r in rows)]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
