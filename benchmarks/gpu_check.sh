#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): the device gate, every collective on NCCL, and DDP,
# FSDP and DeepSpeed two short epochs each, on this machine's NVIDIA GPUs with the host's own
# torch, judged by the tool's gates; one summary table, exit 0 when every stage passed.
#
#   benchmarks/gpu_check.sh [--ranks N] [--out DIR] [--stages gate,smoke,ddp,fsdp,deepspeed]
#
# PYTHON names the interpreter that has torch (default: python3); it needs the project's
# packages too (./setup.sh env makes .venv; on a bare GPU machine, wheels on PYTHONPATH).
# The whole check is bounded at 8 minutes.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
python=${PYTHON:-python3}
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
        sed 's/^/[gpu] /'
else
    echo "[gpu] nvidia-smi not found: the driver's tools are not on PATH"
fi
"$python" -c 'import torch; print("[gpu] torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")'
export PYTHONUNBUFFERED=1
exec timeout --signal=TERM --kill-after=10 480 "$python" benchmarks/gpu_check.py --timeout 150 "$@"
