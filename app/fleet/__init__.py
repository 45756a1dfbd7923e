"""The fabric watch: a node agent (`hostnet-rdma fabric-watch`) that checks its own node and the
paths to a rotating set of peers, and publishes the answer where schedulers and operators look
(a node condition, Events, Prometheus, optionally a taint).

Pure parts, no I/O: `schedule` (which peers this node probes in round r), `report` (what an agent
publishes about itself on its Node, read back by its peers), `condition` (a sweep's verdict, the
node condition and its staleness), `agent` (one round's decisions: what to write, when). The
Kubernetes calls live in app.kube (NodeAgentApi), the probes in app.wrapper (pathprobe, fabric).
"""
