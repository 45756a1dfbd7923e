"""The cluster config file (the chart's ConfigMap) -> InjectConfig. Validated with pydantic.

Example (every key optional; profiles are merged over the built-in ones):

    inject: {dns: true, infiniband: true, shm: true, shmSize: 32Gi, capabilities: true,
             privileged: true, ncclEnv: true, wrap: true}
    wrapper: {glooSocketIfname: true, ncclSocketIfname: false, dnsTimeoutSeconds: 300,
              minTorch: "2.5", rdzvPort: 23456, delivery: initContainer, image: "",
              imagePullPolicy: IfNotPresent}
    clusterDomain: cluster.local
    rdmaResourcePrefixes: ["rdma/"]
    defaultProfile: default
    profiles:
      BM.GPU4.8: {description: "...", env: {NCCL_IB_HCA: "=mlx5_0,..."}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core import quantity
from app.core.params import BUILTIN_PROFILES, ConfigError, InjectConfig, Profile


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Inject(_Strict):
    dns: bool = True
    infiniband: bool = True
    infiniband_path: str = Field("/dev/infiniband", alias="infinibandPath")
    shm: bool = True
    shm_size: str = Field("32Gi", alias="shmSize", pattern=quantity.PATTERN.pattern)
    capabilities: bool = True
    privileged: bool = True
    nccl_env: bool = Field(True, alias="ncclEnv")
    wrap: bool = True


class _Wrapper(_Strict):
    gloo_socket_ifname: bool = Field(True, alias="glooSocketIfname")
    nccl_socket_ifname: bool = Field(False, alias="ncclSocketIfname")
    dns_timeout_seconds: int = Field(300, alias="dnsTimeoutSeconds", ge=0, le=3600)
    min_torch: str = Field("2.5", alias="minTorch", pattern=r"^\d+(\.\d+){0,2}$")
    rdzv_port: int = Field(23456, alias="rdzvPort", ge=1, le=65535)
    fabric_preflight: Literal["warn", "strict", "off"] = Field("warn", alias="fabricPreflight")
    delivery: Literal["initContainer", "inline"] = "initContainer"
    image: str = Field("", pattern=r"^[^\s]*$", max_length=512)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", alias="imagePullPolicy")


class _Limits(_Strict):
    max_training_containers: int = Field(8, alias="maxTrainingContainers", ge=1, le=64)
    max_patch_bytes: int = Field(1 << 20, alias="maxPatchBytes", ge=64 << 10, le=3 << 20)


class _Profile(_Strict):
    description: str = ""
    env: dict[str, str | int | float] = {}


class _File(_Strict):
    inject: _Inject = _Inject()  # type: ignore[call-arg]
    wrapper: _Wrapper = _Wrapper()  # type: ignore[call-arg]
    cluster_domain: str = Field("cluster.local", alias="clusterDomain")
    rdma_resource_prefixes: list[str] = Field(["rdma/"], alias="rdmaResourcePrefixes")
    limits: _Limits = _Limits()  # type: ignore[call-arg]
    default_profile: str = Field("default", alias="defaultProfile")
    profiles: dict[str, _Profile] = {}


def from_dict(data: dict[str, Any] | None) -> InjectConfig:
    try:
        parsed = _File.model_validate(data or {})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"config: {where}: {first['msg']}") from None
    profiles = dict(BUILTIN_PROFILES)
    for name, p in parsed.profiles.items():
        profiles[name] = Profile.build(name, dict(p.env), p.description)
    if parsed.default_profile not in profiles:
        raise ConfigError(f"config: defaultProfile {parsed.default_profile!r} is not a known profile")
    i, w = parsed.inject, parsed.wrapper
    return InjectConfig(
        dns=i.dns,
        infiniband=i.infiniband,
        infiniband_path=i.infiniband_path,
        shm=i.shm,
        shm_size=i.shm_size,
        capabilities=i.capabilities,
        privileged=i.privileged,
        nccl_env=i.nccl_env,
        wrap=i.wrap,
        gloo_socket_ifname=w.gloo_socket_ifname,
        nccl_socket_ifname=w.nccl_socket_ifname,
        cluster_domain=parsed.cluster_domain,
        rdzv_port=w.rdzv_port,
        dns_timeout_seconds=w.dns_timeout_seconds,
        min_torch=w.min_torch,
        fabric_preflight=w.fabric_preflight,
        wrapper_delivery=w.delivery,
        wrapper_image=w.image,
        wrapper_image_pull_policy=w.image_pull_policy,
        rdma_resource_prefixes=tuple(parsed.rdma_resource_prefixes),
        max_training_containers=parsed.limits.max_training_containers,
        max_patch_bytes=parsed.limits.max_patch_bytes,
        profiles=profiles,
        default_profile=parsed.default_profile,
    )


def load(path: str | Path | None) -> InjectConfig:
    """Read the config file; no path means built-in defaults."""
    if path is None:
        return from_dict(None)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"config: cannot read {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config: {path} is not YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        # Loading it as "all defaults" would silently undo every setting of the cluster (say,
        # privileged: false) when a ConfigMap is emptied by mistake.
        raise ConfigError(f"config: {path} is empty; refused (the last good config stays in force)")
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping")
    return from_dict(data)
