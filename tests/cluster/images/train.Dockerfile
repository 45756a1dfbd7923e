# Training image of the cluster tier: Debian's Python 3.11 and a real `torchrun` entry point.
# torch itself (a 4 GB CUDA wheel set that would be copied into every node's containerd on every
# cold run) is mounted read-only from the test machine's site-packages at /opt/torch/<i>, with
# PYTHONPATH set by the job (tests/cluster/jobs.py).
ARG BASE
FROM ${BASE}
# OpenSSH as the MPI Operator's images set it up: an MPIJob's workers run `sshd -De` and its
# launcher reaches them with the key the operator mounts from a Secret at /root/.ssh (read-only,
# so no known_hosts and no permission checks), on port 2222. nslookup (dnsutils): the Training
# Operator's init container runs this image (tests/cluster/launchers.py).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server openssh-client dnsutils \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /run/sshd \
 && printf 'StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\nPort 2222\n' >>/etc/ssh/ssh_config \
 && printf 'StrictModes no\nPort 2222\n' >>/etc/ssh/sshd_config
COPY torchrun /usr/local/bin/torchrun
ENV OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
