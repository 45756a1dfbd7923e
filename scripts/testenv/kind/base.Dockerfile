# kind's base image (sigs.k8s.io/kind images/base/Dockerfile at the pinned kind version), made
# buildable on the test machine: the legacy builder (no BuildKit: no COPY --chmod), FROM a local
# Debian, and the node binaries built on the host from the Go module proxy (bits/) instead of
# git clones. Then what this machine's kernel needs (cgroup v1, no CAP_SYS_RESOURCE):
#   - containerd's restrict_oom_score_adj (runc cannot lower oom_score_adj here);
#   - a kubelet drop-in with failCgroupV1: false (kubelet >= 1.35 refuses cgroup v1 otherwise);
#   - IPv4 forwarding in the node (docker leaves a new network namespace at 0 here, and
#     cross-node pod traffic is routed through the node).
# The files under files/ are kind's own, copied from its module by prepare.sh.
ARG BASE_IMAGE
FROM $BASE_IMAGE
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/LICENSES/ /LICENSES/
COPY files/etc/ /etc/
RUN chmod 0755 /usr/local/bin/* /kind /kind/bin /kind/bin/* \
    && echo "Installing Packages ..." \
    && DEBIAN_FRONTEND=noninteractive clean-install \
      systemd \
      conntrack iptables nftables iproute2 ethtool util-linux mount kmod \
      libseccomp2 pigz fuse-overlayfs \
      nfs-common open-iscsi \
      e2fsprogs \
      bash ca-certificates curl jq procps \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* \
    && rm -f /etc/systemd/system/*.wants/* \
    && rm -f /lib/systemd/system/local-fs.target.wants/* \
    && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
    && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
    && rm -f /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && ln -sf /usr/lib/systemd/systemd /sbin/init
RUN systemctl enable kubelet.service \
    && systemctl enable containerd.service \
    && systemctl enable undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && mkdir -p /etc/kubernetes/manifests
COPY bits/containerd bits/ctr bits/containerd-shim-runc-v2 bits/crictl /usr/local/bin/
COPY bits/runc /usr/local/sbin/runc
COPY bits/cni/ /opt/cni/bin/
RUN sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml \
    && grep -q 'restrict_oom_score_adj = true' /etc/containerd/config.toml \
    && mkdir -p /etc/kubernetes/kubelet.conf.d \
    && printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n' \
       > /etc/kubernetes/kubelet.conf.d/50-cgroup-v1.conf \
    && sed -i 's|^KUBELET_EXTRA_ARGS=.*|& --config-dir=/etc/kubernetes/kubelet.conf.d|' /etc/default/kubelet \
    && echo 'net.ipv4.ip_forward = 1' > /etc/sysctl.d/90-ip-forward.conf \
    && ctr oci spec \
        | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
        | jq 'del(.process.rlimits)' \
        > /etc/containerd/cri-base.json \
    && containerd --version && runc --version && crictl --version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
