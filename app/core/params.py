"""All inputs of the core travel in one object; the core does no lookups."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Keys a profile may set: NCCL and the transports it sits beside. Nothing else, so a
# profile (or whoever edits the ConfigMap) cannot inject arbitrary env into pods.
ALLOWED_ENV_KEY = re.compile(r"^(NCCL|RCCL|TORCH_NCCL|GLOO|UCX|NVSHMEM)_[A-Z0-9_]+$")

STEP_NAMES = ("dns", "infiniband", "shm", "capabilities", "privileged", "nccl-env", "wrap")


class ConfigError(ValueError):
    """The cluster configuration (profiles, defaults) is invalid."""


@dataclass(frozen=True)
class Profile:
    name: str
    env: tuple[tuple[str, str], ...]
    description: str = ""

    @staticmethod
    def build(name: str, env: dict[str, Any], description: str = "") -> Profile:
        items: list[tuple[str, str]] = []
        for key, value in env.items():
            # fullmatch: `$` in a pattern also matches before a final newline ("NCCL_FOO\n").
            if not isinstance(key, str) or not ALLOWED_ENV_KEY.fullmatch(key):
                raise ConfigError(
                    f"profile {name!r}: env key {key!r} is not allowed; only NCCL_*, "
                    "RCCL_*, TORCH_NCCL_*, GLOO_*, UCX_*, NVSHMEM_* keys may come from profiles"
                )
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ConfigError(f"profile {name!r}: value of {key} must be a string or number")
            items.append((key, str(value)))
        return Profile(name=name, env=tuple(items), description=description)


BM_GPU4_8_HCAS = (
    "=mlx5_0,mlx5_2,mlx5_6,mlx5_8,mlx5_10,mlx5_12,mlx5_14,mlx5_16,"
    "mlx5_1,mlx5_3,mlx5_7,mlx5_9,mlx5_11,mlx5_13,mlx5_15,mlx5_17"
)

# NCCL_DEBUG=INFO with INIT,NET logs only at communicator setup, and is what lets
# `hostnet-rdma verify` (and a human) see "Using network IB" and the GDRDMA channels.
_DEBUG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


def _hcas(*numbers: int, prefix: str = "mlx5_", exact: bool = True) -> str:
    return ("=" if exact else "") + ",".join(f"{prefix}{n}" for n in numbers)


# Node shapes, keyed by their `node.kubernetes.io/instance-type`. OCI's are Oracle's published
# recommended NCCL/RCCL parameters by shape (oracle-quickstart/oci-hpc-oke,
# docs/recommended-nccl-rccl-parameters-by-shape.md), their NCCL_DEBUG replaced by _DEBUG. On
# RoCE: the GID index of RoCE v2, traffic class 41, the verbs timeout 22 (~17 s); NCCL_IB_HCA
# lists the RDMA ports and leaves out the front-end NIC, which is RDMA-capable too.
_ROCE = {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "41", "NCCL_IB_SL": "0", "NCCL_IB_TIMEOUT": "22"}
_A100_16 = _hcas(1, 2, 3, 4, 5, 6, 7, 8, 14, 15, 16, 17, 9, 10, 11, 12)
_HOPPER = {"NCCL_CUMEM_ENABLE": "0", "NCCL_IB_SPLIT_DATA_ON_QPS": "0", **_ROCE, "NCCL_SOCKET_IFNAME": "eth0",
           "NCCL_IGNORE_CPU_AFFINITY": "1"}  # fmt: skip
_SHAPES: dict[str, tuple[str, dict[str, str]]] = {
    "BM.GPU4.8": ("OCI BM.GPU4.8: 8x A100 40GB, 16 RoCE ports (front-end mlx5_4, mlx5_5 left out)",
                  {"NCCL_IB_HCA": BM_GPU4_8_HCAS, **_ROCE, "NCCL_IB_QPS_PER_CONNECTION": "4",
                   "NCCL_IB_SPLIT_DATA_ON_QPS": "0"}),
    "BM.GPU.A100-v2.8": ("OCI BM.GPU.A100-v2.8: 8x A100 80GB, 16 RoCE ports",
                         {"NCCL_IB_HCA": _A100_16, **_ROCE, "NCCL_IB_QPS_PER_CONNECTION": "4",
                          "NCCL_IB_SPLIT_DATA_ON_QPS": "0"}),
    "BM.GPU.B4.8": ("OCI BM.GPU.B4.8: 8x A100 40GB, 16 RoCE ports",
                    {"NCCL_IB_HCA": _A100_16, **_ROCE, "NCCL_IB_QPS_PER_CONNECTION": "4",
                     "NCCL_IB_SPLIT_DATA_ON_QPS": "0"}),
    "BM.GPU.H100.8": ("OCI BM.GPU.H100.8: 8x H100, 16 RoCE ports",
                      {"NCCL_IB_HCA": _hcas(0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17), **_HOPPER}),
    "BM.GPU.H200.8": ("OCI BM.GPU.H200.8: 8x H200, 8 RoCE ports",
                      {"NCCL_IB_HCA": _hcas(0, 3, 4, 5, 6, 9, 10, 11), **_HOPPER}),
    "BM.GPU.B200.8": ("OCI BM.GPU.B200.8: 8x B200, 8 RoCE ports",
                      {"NCCL_IB_HCA": _hcas(0, 3, 4, 5, 6, 9, 10, 11), **_HOPPER}),
    "BM.GPU.B300.8": ("OCI BM.GPU.B300.8: 8x B300, 16 RoCE ports",
                      {"NCCL_IB_HCA": _hcas(0, 1, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21), **_HOPPER}),
    "BM.GPU.GB200.4": ("OCI BM.GPU.GB200.4: 4x GB200, multi-node NVLink",
                       {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1", "NCCL_NET_PLUGIN": "sys",
                        "NCCL_IB_HCA": _hcas(0, 1, 3, 4, exact=False), "NCCL_NVLS_ENABLE": "1",
                        "NCCL_SOCKET_IFNAME": "eth0"}),
    "BM.GPU.GB200-v2.4": ("OCI BM.GPU.GB200-v2.4: 4x GB200, multi-node NVLink",
                          {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1", "NCCL_NET_PLUGIN": "sys",
                           "NCCL_IB_HCA": _hcas(0, 1, 3, 4, exact=False), "NCCL_NVLS_ENABLE": "1",
                           "NCCL_SOCKET_IFNAME": "eth0"}),
    "BM.GPU.GB200-v3.4": ("OCI BM.GPU.GB200-v3.4: 4x GB200, 8 RoCE ports, multi-node NVLink",
                          {**_ROCE, "NCCL_IB_QPS_PER_CONNECTION": "1", "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
                           "NCCL_CUMEM_ENABLE": "1", "NCCL_IB_HCA": _hcas(0, 1, 2, 3, 5, 6, 7, 8),
                           "NCCL_NET_GDR_C2C": "1", "NCCL_MNNVL_ENABLE": "1", "NCCL_NET_PLUGIN": "none"}),
    "BM.GPU.GB300.4": ("OCI BM.GPU.GB300.4: 4x GB300, 8 RoCE ports, multi-node NVLink",
                       {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1", "NCCL_NET_PLUGIN": "none",
                        "NCCL_IB_HCA": _hcas(0, 1, 2, 3, 5, 6, 7, 8), "NCCL_NVLS_ENABLE": "1",
                        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_NET_GDR_C2C": "1", **_ROCE, "NCCL_BUFFSIZE": "16777216",
                        "NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
                        "NCCL_DMABUF_ENABLE": "1"}),
    "BM.GPU.MI300X.8": ("OCI BM.GPU.MI300X.8: 8x MI300X (RCCL), 8 RoCE ports",
                        {"NCCL_CUMEM_ENABLE": "0", **_ROCE, "NCCL_IB_QPS_PER_CONNECTION": "1",
                         "NCCL_IB_SPLIT_DATA_ON_QPS": "0", "NCCL_IB_HCA": _hcas(0, 2, 3, 4, 5, 7, 8, 9),
                         "NCCL_PXN_DISABLE": "0", "NCCL_NET_PLUGIN": "none"}),
    "BM.GPU.MI355X.8": ("OCI BM.GPU.MI355X.8: 8x MI355X (RCCL), 8 Pensando ports",
                        {"NCCL_IB_HCA": _hcas(0, 2, 3, 4, 5, 7, 8, 9, prefix="ionic_"), "NCCL_SOCKET_IFNAME": "ens9np0",
                         "NCCL_GDR_FLUSH_DISABLE": "1", "RCCL_GDR_FLUSH_GPU_MEM_NO_RELAXED_ORDERING": "0",
                         "NCCL_IB_QPS_PER_CONNECTION": "2", "NCCL_IB_GID_INDEX": "1", "NCCL_BUFFSIZE": "16777216",
                         "NCCL_MAX_P2P_NCHANNELS": "32", "NCCL_IB_TC": "41", "NCCL_IB_FIFO_TC": "185",
                         "NCCL_IGNORE_CPU_AFFINITY": "1", "NCCL_PXN_DISABLE": "0", "NCCL_DMABUF_ENABLE": "1",
                         "NCCL_NET_OPTIONAL_RECV_COMPLETION": "1", "RCCL_IB_ABORT_ON_ERROR": "1",
                         "NCCL_IB_USE_INLINE": "1", "NCCL_NET_PLUGIN": "librccl-anp.so", "RCCL_LL128_FORCE_ENABLE": "1"}),
    "BM.GPU.MI355X-v1.8": ("OCI BM.GPU.MI355X-v1.8: 8x MI355X (RCCL), 8 RoCE ports",
                           {"NCCL_MIN_CHANNEL": "32", "NCCL_IB_QPS_PER_CONNECTION": "1", "NCCL_SOCKET_IFNAME": "eth0",
                            "NCCL_IB_SL": "0", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "41",
                            "NCCL_IGNORE_CPU_AFFINITY": "1", "NCCL_IB_HCA": _hcas(0, 1, 2, 3, 4, 5, 6, 7)}),
    # Azure NDv5 (8x H100 or H200, 8 NDR InfiniBand ports mlx5_ib0..7): InfiniBand, so no GID index
    # or traffic class; the prefix leaves out the accelerated-networking NIC (mlx5_an0).
    "Standard_ND96isr_H100_v5": ("Azure ND H100 v5: 8x H100, 8 InfiniBand ports (mlx5_ib*)",
                                 {"NCCL_IB_HCA": "mlx5_ib", "NCCL_IB_PCI_RELAXED_ORDERING": "1",
                                  "NCCL_SOCKET_IFNAME": "eth0"}),
    "Standard_ND96isr_H200_v5": ("Azure ND H200 v5: 8x H200, 8 InfiniBand ports (mlx5_ib*)",
                                 {"NCCL_IB_HCA": "mlx5_ib", "NCCL_IB_PCI_RELAXED_ORDERING": "1",
                                  "NCCL_SOCKET_IFNAME": "eth0"}),
}  # fmt: skip

BUILTIN_PROFILES: dict[str, Profile] = {
    "default": Profile.build("default", dict(_DEBUG), "NCCL picks devices itself"),
    **{name: Profile.build(name, {**_DEBUG, **env}, about) for name, (about, env) in _SHAPES.items()},
}


@dataclass(frozen=True)
class InjectConfig:
    """Cluster-wide defaults (Helm values -> ConfigMap -> this). Annotations refine per pod."""

    dns: bool = True
    infiniband: bool = True
    infiniband_path: str = "/dev/infiniband"
    shm: bool = True
    shm_size: str = "32Gi"
    capabilities: bool = True
    privileged: bool = True
    nccl_env: bool = True
    wrap: bool = True
    gloo_socket_ifname: bool = True
    nccl_socket_ifname: bool = False
    cluster_domain: str = "cluster.local"
    rdzv_port: int = 23456
    # Launcher-default endpoints get a port per job in [rdzv_port, rdzv_port + span): jobs that
    # share nodes would otherwise bind one host port. 1: every job on rdzv_port.
    rdzv_port_span: int = 1000
    # Declare the store's port (a host port, on the host network) on the pod that hosts it, so
    # the scheduler keeps two stores of one port off one node.
    store_host_port: bool = True
    dns_timeout_seconds: int = 300
    min_torch: str = "2.5"
    fabric_preflight: str = "warn"
    # Stop a job whose NCCL chose sockets instead of RDMA (the wrapper's transport watch), rather
    # than let it run at socket speed. Per pod: the annotation hostnet-rdma.io/require-rdma.
    require_rdma: bool = False
    # How the wrapper files reach the pod: "imageVolume" mounts them read-only from wrapper_image
    # (Kubernetes 1.35+ with containerd 2.1+ / CRI-O 1.31+: smallest pod, no extra container);
    # "initContainer" copies them from wrapper_image into the injected emptyDir; "inline"
    # carries them in the command (no image pull). With no image configured (the CLI, no
    # config) there is nothing to mount or copy from: inline.
    wrapper_delivery: str = "initContainer"
    wrapper_image: str = ""
    wrapper_image_pull_policy: str = "IfNotPresent"
    # imageVolume: the wrapper's directory inside wrapper_image, mounted as the subPath; "" for
    # the wrapper image built from deploy/Dockerfile (--target wrapper: its files at the root,
    # no subPath in any pod), "wrapper" for the webhook's own image.
    wrapper_image_sub_path: str = ""
    # initContainer delivery: the init container's resources. Empty: those of the first training
    # container (cpu, memory, ephemeral-storage; never its GPUs), so whatever a namespace's
    # ResourceQuota and LimitRange accept of the training container they accept of this one,
    # the pod's effective requests do not grow (the max over init containers, the sum over the
    # others) and a Guaranteed pod stays Guaranteed. Else {requests: {...}, limits: {...}} as given.
    init_resources: dict[str, dict[str, str]] = field(default_factory=dict)
    # Resource-name prefixes of a cluster's own NIC allocators, beyond those app/core/allocators.py
    # knows: such pods get no hostPath of every device, no privileged, no SYS_ADMIN.
    rdma_resource_prefixes: tuple[str, ...] = ()
    # A DRA resource claim on a pod is taken to carry its NICs (admission cannot see its device class).
    dra_claims_carry_nics: bool = True
    # Bounds on one pod's answer: every training container carries the wrapper payload, so a
    # pod with hundreds of them would turn a small request into a huge response.
    max_training_containers: int = 8
    max_patch_bytes: int = 1 << 20
    profiles: dict[str, Profile] = field(default_factory=lambda: dict(BUILTIN_PROFILES))
    default_profile: str = "default"
    # Which pods the webhook is sent (the chart renders its selectors from these; app.core.selection):
    # "namespace": every host-network pod of a labelled namespace, but a pod labelled
    # hostnet-rdma.io/inject=disabled, and only training pods get the plumbing;
    # "pod": the cautious mode, where the pod (its job's pod template) must carry the label too.
    opt_in: str = "namespace"
    # Namespaces never sent, labelled or not (the chart adds its own release namespace).
    exclude_namespaces: tuple[str, ...] = ("kube-system",)


@dataclass(frozen=True)
class Params:
    """One admission's inputs besides the pod."""

    config: InjectConfig = field(default_factory=InjectConfig)
    namespace: str = ""
    # zlib+base64 of the wrapper source; supplied by the shell (app.wrapper.payload()).
    wrapper_payload: str = ""
    version: str = "0.0.0"
