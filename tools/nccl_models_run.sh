#!/usr/bin/env bash
# Tensor-parallel decoding on several GPUs of one host (issue 23), on nvidia-h200-x2 or -x4;
# docs/multi_gpu.md ("Tensor-parallel models") says what each step must show. Everything lands in
# $OUT (read tp_summary.txt first):
#   0. the machine: GPUs, their links, NCCL's library and version
#   1. the CPU suite of tensor-parallel nbx.models (fake communicator, threads)        -> tp_cpu.log
#   2. tests/gpu/test_tensor_parallel_gpus.py with torch blocked, NPROC ranks through nccl_launch:
#      logits vs the single GPU, greedy/sampled tokens agreeing on every rank, a dying rank  -> tp_gpu.log
#   3. decode of the Llama-3-8B shape (seeded bf16 weights) at TP=1, 2 (and 4 when NPROC >= 4), and
#      of the Llama-3-70B shape at TP=2 (and 4): tokens/s, roofline, tokens vs TP=1         -> tp_bench.log
#   4. all_reduce of [1..64, 8192] bf16: nbx vs torch.distributed (NCCL's own latency)    -> tp_bench.log
#   5. the goals' summary (bench_tensor_parallel.py summary)                              -> tp_summary.txt
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and PyTorch's / NVSHMEM's switches), as the device
# README asks. Changes no GPU setting. Usage: OUT=/some/dir tools/nccl_models_run.sh   (NPROC=n GPUs;
# default every GPU listed; SKIP_70B=1 skips the 70B shape, which draws 70 G weights per rank: minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/nbx-tp-run}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | tr '\n' ':')${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 TRITON_INTERPRET=0
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/nbx-triton-cache}
PY=${PYTHON:-python3}
NPROC=${NPROC:-$(nvidia-smi -L 2>/dev/null | wc -l)}
export NPROC
SUMMARY="$OUT/tp_summary.txt"
BENCH="$OUT/tp_bench.log"
: > "$SUMMARY"; : > "$BENCH"
WORK=$(mktemp -d)
LAUNCH="$PY -m nbx.devices.nvidia.nccl_launch --id-via file --timeout 900"
B=tools/bench/bench_tensor_parallel.py

{
  echo "== 0. $(date -u +%FT%TZ) $(hostname), NPROC=$NPROC, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  "$PY" -c "
from nbx.devices.nvidia import nccl_library
lib = nccl_library.nccl(); print('NCCL', lib.version_text, 'from', lib.path)"
} 2>&1 | tee -a "$SUMMARY"

echo "== 1. CPU suite: tests/nbx-models/test_tensor_parallel.py" | tee -a "$SUMMARY"
"$PY" -m pytest -q -p no:cacheprovider tests/nbx-models/test_tensor_parallel.py > "$OUT/tp_cpu.log" 2>&1
echo "exit $? ($(tail -n 1 "$OUT/tp_cpu.log"))" | tee -a "$SUMMARY"

echo "== 2. tests/gpu/test_tensor_parallel_gpus.py on $NPROC ranks (torch blocked in pytest and the ranks)" | tee -a "$SUMMARY"
cat > "$WORK/nbx_block_torch.py" <<'PYEOF'
import sys

class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"import of {name!r} blocked: the nbx GPU suite runs without torch", name=name)
        return None

sys.meta_path.insert(0, BlockTorch())
PYEOF
"$PY" -c "
import sys; sys.path.insert(0, '$WORK'); import nbx_block_torch
import pytest
sys.exit(pytest.main(sys.argv[1:]))" -q -rfEsP --tb=short -p no:cacheprovider --durations=5 -m gpu \
  tests/gpu/test_tensor_parallel_gpus.py > "$OUT/tp_gpu.log" 2>&1
echo "exit $? ($(grep -E ' in [0-9.]+s' "$OUT/tp_gpu.log" | tail -n 1))" | tee -a "$SUMMARY"
grep -E "^(FAILED|ERROR) |ranks: logits deviation|RankTimeoutError after" "$OUT/tp_gpu.log" >> "$SUMMARY"

echo "== 3. decode: 8B shape at TP=1/2/4, 70B shape at TP=2/4 (seeded bf16 weights)" | tee -a "$SUMMARY"
bench() { echo "-- $*" >> "$BENCH"; "$@" >> "$BENCH" 2>&1; echo "$* -> exit $?" | tee -a "$SUMMARY"; }
bench timeout 900 "$PY" $B decode --shape 8b --tp 1 --out "$WORK"
for tp in 2 4; do
  [ "$NPROC" -ge "$tp" ] && bench $LAUNCH --nproc $tp -- $B decode --shape 8b --tp $tp --out "$WORK"
done
if [ "${SKIP_70B:-0}" != 1 ]; then
  for tp in 2 4; do
    [ "$NPROC" -ge "$tp" ] && bench $LAUNCH --nproc $tp -- $B decode --shape 70b --tp $tp --out "$WORK"
  done
fi

echo "== 4. all_reduce latency of decode activations: nbx, then torch.distributed (the peer)" | tee -a "$SUMMARY"
bench $LAUNCH --nproc "$NPROC" -- $B allreduce --tp "$NPROC" --out "$WORK"
if "$PY" -c "import torch" 2>/dev/null; then
  bench timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" $B allreduce-torch \
    --tp "$NPROC" --out "$WORK"
else
  echo "torch is not installed: no peer figure" | tee -a "$SUMMARY"
fi

echo "== 5. goals" | tee -a "$SUMMARY"
"$PY" $B summary --out "$WORK" 2>&1 | tee -a "$SUMMARY"
cp "$WORK"/*.json "$OUT"/ 2>/dev/null   # the figures (the logits rows stay behind: too large to bring back)
rm -rf "$WORK"
echo "== summary"
cat "$SUMMARY"
