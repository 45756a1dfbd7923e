"""Every name users and tests depend on (labels, annotations, env, volumes). Keep stable."""

from __future__ import annotations

from app.wrapper import rules

DOMAIN = "hostnet-rdma.io"

# Opt-in: the webhook's namespaceSelector matches this label; its objectSelector sends every
# pod but those labelled `disabled` (opt-in mode `namespace`, the default), or only those
# labelled `enabled` (mode `pod`). A pod labelled `enabled` is a training pod whatever it runs.
INJECT_LABEL = f"{DOMAIN}/inject"
INJECT_LABEL_VALUE = "enabled"
INJECT_DISABLED = "disabled"

# Written on every pod we mutate: JSON with version, launcher, profile, steps.
STATUS_ANNOTATION = f"{DOMAIN}/injected"

# Per-pod knobs (annotations).
ANN_PROFILE = f"{DOMAIN}/profile"
ANN_SHM_SIZE = f"{DOMAIN}/shm-size"
ANN_WRAP = f"{DOMAIN}/wrap"
ANN_PRIVILEGED = f"{DOMAIN}/privileged"
ANN_SKIP = f"{DOMAIN}/skip"
ANN_CONTAINERS = f"{DOMAIN}/containers"
ANN_RDZV_PORT = f"{DOMAIN}/rdzv-port"
ANN_GLOO_IFNAME = f"{DOMAIN}/gloo-socket-ifname"
ANN_NCCL_IFNAME = f"{DOMAIN}/nccl-socket-ifname"
ANN_FABRIC_PREFLIGHT = f"{DOMAIN}/fabric-preflight"
# "false": the pod's allocator resources or DRA claims do not carry its NICs (they are ours to mount).
ANN_ALLOCATED_NICS = f"{DOMAIN}/allocated-nics"
# The job's node count when torchrun is not told and the launcher does not imply it (`2`, `1:4`).
ANN_NNODES = rules.ANN_NNODES
# `keep`: a --local-addr of the user's that other nodes could not reach is refused at start,
# not replaced by the pod's DNS name.
ANN_LOCAL_ADDR = rules.ANN_LOCAL_ADDR
# true: stop the job when NCCL chose sockets instead of RDMA (default: the config's requireRdma).
ANN_REQUIRE_RDMA = rules.ANN_REQUIRE_RDMA

# Volumes we add. The prefix lets a second pass recognise its own work.
VOL_INFINIBAND = "hostnet-rdma-ib"
VOL_SHM = "hostnet-rdma-shm"
# An MPIJob worker's /etc/nccl.conf (a downward-API file of ANN_NCCL_CONF): NCCL reads it in
# every process, also in the ranks sshd starts with an empty environment.
VOL_NCCL_CONF = "hostnet-rdma-nccl-conf"
ANN_NCCL_CONF = f"{DOMAIN}/nccl-conf"
NCCL_CONF_PATH = "/etc/nccl.conf"
# Mounted at BIN_DIR, hence its name.
VOL_BIN = "hostnet-rdma"
# The init container that copies the wrapper into VOL_BIN (wrapper.delivery: initContainer),
# from where the webhook's image holds it (deploy/Dockerfile runs app.wrapper.install there).
INIT_CONTAINER = "hostnet-rdma-wrapper"
# Where the webhook's image holds the wrapper's files: the init container copies them from
# there (wrapper.delivery initContainer). The wrapper image has them at its root.
IMAGE_WRAPPER_DIR = "/wrapper"
BIN_DIR = "/hostnet-rdma"
SHM_PATH = "/dev/shm"
# The DNS policy the dns step sets: the pod resolves cluster names, and its resolv.conf
# searches its namespace's zone first (the wrapper derives its identity from that).
CLUSTER_DNS_POLICY = "ClusterFirstWithHostNet"

# Env contract between the webhook and the in-container wrapper: defined once, in the
# wrapper's rules module (it runs in users' images, so it cannot import the core).
ENV_PREFIX = rules.ENV_PREFIX
ENV_LAUNCHER = rules.ENV_LAUNCHER
ENV_LOCAL_ADDR = rules.ENV_LOCAL_ADDR
ENV_IDENTITIES = rules.ENV_IDENTITIES
ENV_PEERS = rules.ENV_PEERS
ENV_RDZV_ID = rules.ENV_RDZV_ID
ENV_RDZV_BACKEND = rules.ENV_RDZV_BACKEND
ENV_RDZV_ENDPOINT = rules.ENV_RDZV_ENDPOINT
ENV_NNODES = rules.ENV_NNODES
ENV_GLOO_IFNAME = rules.ENV_GLOO_IFNAME
ENV_NCCL_IFNAME = rules.ENV_NCCL_IFNAME
ENV_DNS_TIMEOUT = rules.ENV_DNS_TIMEOUT
ENV_MIN_TORCH = rules.ENV_MIN_TORCH
ENV_DRY_RUN = rules.ENV_DRY_RUN
ENV_FABRIC_PREFLIGHT = rules.ENV_FABRIC_PREFLIGHT
ENV_POD = rules.ENV_POD
ENV_TERMINATION_LOG = rules.ENV_TERMINATION_LOG
ENV_KEEP_LOCAL_ADDR = rules.ENV_KEEP_LOCAL_ADDR
ENV_REQUIRE_RDMA = rules.ENV_REQUIRE_RDMA
FABRIC_PREFLIGHT_MODES = ("warn", "strict", "off")

# Marker argv[0] of the bootstrap shell, so a second pass sees the container is wrapped.
BOOTSTRAP_ARGV0 = "hostnet-rdma-bootstrap"

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
