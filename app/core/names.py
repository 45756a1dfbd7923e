"""Every name users and tests depend on (labels, annotations, env, volumes). Keep stable."""

from __future__ import annotations

DOMAIN = "hostnet-rdma.io"

# Opt-in: the webhook's namespaceSelector and objectSelector both match this label.
INJECT_LABEL = f"{DOMAIN}/inject"
INJECT_LABEL_VALUE = "enabled"

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

# Volumes we add. The prefix lets a second pass recognise its own work.
VOLUME_PREFIX = "hostnet-rdma-"
VOL_INFINIBAND = "hostnet-rdma-infiniband"
VOL_SHM = "hostnet-rdma-shm"
VOL_BIN = "hostnet-rdma-bin"
BIN_DIR = "/hostnet-rdma"
INFINIBAND_PATH = "/dev/infiniband"
SHM_PATH = "/dev/shm"

# Env contract between the webhook and the in-container wrapper (app/wrapper).
ENV_PREFIX = "HOSTNET_RDMA_"
ENV_LAUNCHER = "HOSTNET_RDMA_LAUNCHER"
ENV_LOCAL_ADDR = "HOSTNET_RDMA_LOCAL_ADDR"
ENV_IDENTITIES = "HOSTNET_RDMA_IDENTITIES"
ENV_RDZV_ID = "HOSTNET_RDMA_RDZV_ID"
ENV_RDZV_BACKEND = "HOSTNET_RDMA_RDZV_BACKEND"
ENV_RDZV_ENDPOINT = "HOSTNET_RDMA_RDZV_ENDPOINT"
ENV_NNODES = "HOSTNET_RDMA_NNODES"
ENV_GLOO_IFNAME = "HOSTNET_RDMA_GLOO_SOCKET_IFNAME"
ENV_NCCL_IFNAME = "HOSTNET_RDMA_NCCL_SOCKET_IFNAME"
ENV_DNS_TIMEOUT = "HOSTNET_RDMA_DNS_TIMEOUT"
ENV_MIN_TORCH = "HOSTNET_RDMA_MIN_TORCH"
ENV_DRY_RUN = "HOSTNET_RDMA_DRY_RUN"

# Marker argv[0] of the bootstrap shell, so a second pass sees the container is wrapped.
BOOTSTRAP_ARGV0 = "hostnet-rdma-bootstrap"

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
