# Training image of the cluster tier: Debian's Python 3.11 and a real `torchrun` entry point.
# torch itself (a 4 GB CUDA wheel set that would be copied into every node's containerd on every
# cold run) is mounted read-only from the test machine's site-packages at /opt/torch/<i>, with
# PYTHONPATH set by the job (tests/cluster/jobs.py).
ARG BASE
FROM ${BASE}
COPY torchrun /usr/local/bin/torchrun
ENV OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
