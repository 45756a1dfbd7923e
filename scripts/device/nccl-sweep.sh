#!/usr/bin/env bash
# The e2e data-path sweep (app/e2e/train.py) through real NCCL on one GPU: two ranks with
# different NCCL_HOSTIDs are two hosts to NCCL, so its Socket transport on loopback carries the
# messages. "clean" runs the script as the e2e does; "lost" runs it where the peer's messages of
# 8 KiB and more never arrive (scripts/device/nccl_stuck.py). Logs go to $OUT (default /tmp).
# Made tests/logs/sweep-nccl-h200-*.log (H200, NCCL 2.28.9, torch 2.11).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 LOCAL_RANK=0 E2E_BACKEND=nccl E2E_SWEEP_BOUND=5
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN E2E_SIZE_MB=64
run() {  # name, port, script
  for r in 0 1; do MASTER_PORT=$2 RANK=$r NCCL_HOSTID=node$r timeout 120 python3 "$3" >"$OUT/$1-rank$r.log" 2>&1 & done
  wait
  echo "== $1"; grep -E "HOSTNET-RDMA-E2E|Watchdog caught" "$OUT/$1-rank0.log"
}
E2E_SWEEP_ONLY=0 run clean 29556 app/e2e/train.py
E2E_SWEEP_ONLY=1 STUCK=8192 run lost 29557 scripts/device/nccl_stuck.py
