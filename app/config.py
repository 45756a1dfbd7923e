"""The cluster config file (the chart's ConfigMap) -> InjectConfig. Validated with pydantic.

Example (every key optional; profiles are merged over the built-in ones):

    inject: {dns: true, infiniband: true, shm: true, shmSize: 32Gi, capabilities: true,
             privileged: true, ncclEnv: true, wrap: true}
    wrapper: {glooSocketIfname: true, ncclSocketIfname: false, dnsTimeoutSeconds: 300,
              minTorch: "2.5", rdzvPort: 23456, delivery: initContainer, image: "",
              imagePullPolicy: IfNotPresent}
    clusterDomain: cluster.local
    rdmaResourcePrefixes: ["example.com/nic-"]   # NIC allocators beyond the built-in ones
    draClaimsCarryNics: true  # a DRA claim on a pod is taken to carry its NICs
    optIn: namespace          # or pod: the pod label is required too
    excludeNamespaces: [kube-system]
    defaultProfile: default
    profiles:
      BM.GPU4.8: {description: "...", env: {NCCL_IB_HCA: "=mlx5_0,..."}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core import quantity
from app.core.params import BUILTIN_PROFILES, ConfigError, InjectConfig, Profile


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# Defaults come from InjectConfig (the core's): this file only adds names, types and bounds.
_D = InjectConfig()


class _Inject(_Strict):
    dns: bool = _D.dns
    infiniband: bool = _D.infiniband
    # A device directory: whoever edits the config must not be able to mount the node's root
    # (or any other host path) into every privileged training container.
    infiniband_path: str = Field(
        _D.infiniband_path, alias="infinibandPath", pattern=r"^/dev(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$", max_length=256
    )
    shm: bool = _D.shm
    shm_size: str = Field(_D.shm_size, alias="shmSize", pattern=quantity.PATTERN.pattern)
    capabilities: bool = _D.capabilities
    privileged: bool = _D.privileged
    nccl_env: bool = Field(_D.nccl_env, alias="ncclEnv")
    wrap: bool = _D.wrap


_Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$", max_length=32)]
_ResourceName = Literal["cpu", "memory", "ephemeral-storage"]


class _Resources(_Strict):
    requests: dict[_ResourceName, _Quantity] = {}
    limits: dict[_ResourceName, _Quantity] = {}


class _Wrapper(_Strict):
    gloo_socket_ifname: bool = Field(_D.gloo_socket_ifname, alias="glooSocketIfname")
    nccl_socket_ifname: bool = Field(_D.nccl_socket_ifname, alias="ncclSocketIfname")
    dns_timeout_seconds: int = Field(_D.dns_timeout_seconds, alias="dnsTimeoutSeconds", ge=0, le=3600)
    min_torch: str = Field(_D.min_torch, alias="minTorch", pattern=r"^\d+(\.\d+){0,2}$")
    rdzv_port: int = Field(_D.rdzv_port, alias="rdzvPort", ge=1, le=65535)
    rdzv_port_span: int = Field(_D.rdzv_port_span, alias="rdzvPortSpan", ge=1, le=10000)
    store_host_port: bool = Field(_D.store_host_port, alias="storeHostPort")
    # (the core keeps these as plain strings; the file accepts only the listed values)
    fabric_preflight: Literal["warn", "strict", "off"] = Field(cast(Any, _D.fabric_preflight), alias="fabricPreflight")
    require_rdma: bool = Field(_D.require_rdma, alias="requireRdma")
    delivery: Literal["imageVolume", "initContainer", "inline"] = cast(Any, _D.wrapper_delivery)
    image: str = Field(_D.wrapper_image, pattern=r"^[^\s]*$", max_length=512)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        cast(Any, _D.wrapper_image_pull_policy), alias="imagePullPolicy"
    )
    # imageVolume: the wrapper's directory inside `image`; "" for the wrapper image (its files
    # at the root), `wrapper` for the webhook's own image.
    image_sub_path: str = Field(
        _D.wrapper_image_sub_path, alias="imageSubPath", pattern=r"^([A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*)?$",
        max_length=128,
    )  # fmt: skip
    # initContainer delivery: the init container's resources; empty: the training container's
    # cpu/memory/ephemeral-storage (what its namespace's quota and LimitRange accept).
    init_resources: _Resources = Field(_Resources(), alias="initResources")


class _Limits(_Strict):
    max_training_containers: int = Field(_D.max_training_containers, alias="maxTrainingContainers", ge=1, le=64)
    max_patch_bytes: int = Field(_D.max_patch_bytes, alias="maxPatchBytes", ge=64 << 10, le=3 << 20)


_Namespace = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]


class _Profile(_Strict):
    description: str = ""
    env: dict[str, str | int | float] = {}


class _File(_Strict):
    inject: _Inject = _Inject()  # type: ignore[call-arg]
    wrapper: _Wrapper = _Wrapper()  # type: ignore[call-arg]
    cluster_domain: str = Field(_D.cluster_domain, alias="clusterDomain")
    rdma_resource_prefixes: list[str] = Field(list(_D.rdma_resource_prefixes), alias="rdmaResourcePrefixes")
    dra_claims_carry_nics: bool = Field(_D.dra_claims_carry_nics, alias="draClaimsCarryNics")
    limits: _Limits = _Limits()  # type: ignore[call-arg]
    default_profile: str = Field(_D.default_profile, alias="defaultProfile")
    profiles: dict[str, _Profile] = {}
    opt_in: Literal["namespace", "pod"] = Field(cast(Any, _D.opt_in), alias="optIn")
    # DNS labels (the chart adds its release namespace to webhook.excludeNamespaces here).
    exclude_namespaces: list[_Namespace] = Field(
        list(_D.exclude_namespaces), alias="excludeNamespaces", max_length=256,
    )  # fmt: skip


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
    # Field names match InjectConfig's; the wrapper's delivery keys carry a prefix there.
    wrapper = {("wrapper_" + k if k in ("delivery", "image", "image_pull_policy", "image_sub_path") else k): v
               for k, v in parsed.wrapper.model_dump().items()}  # fmt: skip
    if parsed.wrapper.rdzv_port + parsed.wrapper.rdzv_port_span - 1 > 65535:
        raise ConfigError("config: wrapper.rdzvPort + rdzvPortSpan - 1 is over 65535")
    wrapper["init_resources"] = {k: v for k, v in parsed.wrapper.init_resources.model_dump().items() if v}
    return InjectConfig(
        **parsed.inject.model_dump(),
        **wrapper,
        **parsed.limits.model_dump(),
        cluster_domain=parsed.cluster_domain,
        rdma_resource_prefixes=tuple(parsed.rdma_resource_prefixes),
        dra_claims_carry_nics=parsed.dra_claims_carry_nics,
        profiles=profiles,
        default_profile=parsed.default_profile,
        opt_in=parsed.opt_in,
        exclude_namespaces=tuple(parsed.exclude_namespaces),
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
