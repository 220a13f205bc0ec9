#!/usr/bin/env bash
# Tensor-parallel decoding on several GPUs of one host (issue 23), on nvidia-h200-x2 or -x4;
# docs/multi_gpu.md ("Tensor-parallel models") says what each step must show. Everything lands in
# $OUT, 5 files (read tp_summary.txt first; tp_cpu.log, tp_gpu.log, tp_bench.log, tp_figures.json):
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
# default every GPU listed). STEPS picks the steps, default "cpu gpu 8b 70b allreduce"; a device call
# lasts 10 minutes at most, so run them in three calls: STEPS="cpu gpu allreduce", STEPS=8b, STEPS=70b
# (each call's summary stands alone: the 8B speedups compare runs of the same call).
set -uo pipefail
STEPS=" ${STEPS:-cpu gpu 8b 70b allreduce} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
cd "$(dirname "$0")/.." && . tools/nccl_env.sh
export NPROC   # the GPU test reads it: its number of ranks
OUT=${OUT:-/tmp/nbx-tp-run}
mkdir -p "$OUT"
SUMMARY="$OUT/tp_summary.txt"
BENCH="$OUT/tp_bench.log"
: > "$SUMMARY"; : > "$BENCH"
WORK=$(mktemp -d)
LAUNCH="$PY -m nbx.devices.nvidia.nccl_launch --id-via file --timeout 540"
B=tools/bench/bench_tensor_parallel.py

{
  echo "== 0. $(date -u +%FT%TZ) $(hostname), NPROC=$NPROC, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  "$PY" -c "
from nbx.devices.nvidia import nccl_library
lib = nccl_library.nccl(); print('NCCL', lib.version_text, 'from', lib.path)"
} 2>&1 | tee -a "$SUMMARY"

if step cpu; then
echo "== 1. CPU suite: tests/nbx-models/test_tensor_parallel.py" | tee -a "$SUMMARY"
TRITON_INTERPRET=1 "$PY" -m pytest -q -p no:cacheprovider tests/nbx-models/test_tensor_parallel.py > "$OUT/tp_cpu.log" 2>&1  # tolerances: the interp device file
echo "exit $? ($(tail -n 1 "$OUT/tp_cpu.log"))" | tee -a "$SUMMARY"
fi

if step gpu; then
echo "== 2. tests/gpu/test_tensor_parallel_gpus.py on $NPROC ranks (torch blocked in pytest and the ranks)" | tee -a "$SUMMARY"
PYTHONPATH="$PWD/tools/torch_blocker:$PYTHONPATH" "$PY" -m pytest -p nbx_block_torch -q -rfEsP --tb=short \
  -p no:cacheprovider --durations=5 -m gpu tests/gpu/test_tensor_parallel_gpus.py > "$OUT/tp_gpu.log" 2>&1
echo "exit $? ($(grep -E ' in [0-9.]+s' "$OUT/tp_gpu.log" | tail -n 1))" | tee -a "$SUMMARY"
grep -E "^(FAILED|ERROR) |ranks: logits deviation|RankTimeoutError after" "$OUT/tp_gpu.log" >> "$SUMMARY"
fi

bench() { echo "-- $*" >> "$BENCH"; "$@" >> "$BENCH" 2>&1; echo "$* -> exit $?" | tee -a "$SUMMARY"; }
if step 8b; then
  echo "== 3a. decode: the Llama-3-8B shape at TP=1, 2 (4) (seeded bf16 weights)" | tee -a "$SUMMARY"
  bench timeout 540 "$PY" $B decode --shape 8b --tp 1 --out "$WORK"
  for tp in 2 4; do
    [ "$NPROC" -ge "$tp" ] && bench $LAUNCH --nproc $tp -- $B decode --shape 8b --tp $tp --out "$WORK"
  done
fi
if step 70b; then
  echo "== 3b. decode: the Llama-3-70B shape at TP=2 (4) (seeded bf16 weights drawn on each GPU)" | tee -a "$SUMMARY"
  for tp in 2 4; do
    [ "$NPROC" -ge "$tp" ] && bench $LAUNCH --nproc $tp -- $B decode --shape 70b --tp $tp --out "$WORK"
  done
fi

if step allreduce; then
echo "== 4. all_reduce latency of decode activations: nbx, then torch.distributed (the peer)" | tee -a "$SUMMARY"
bench $LAUNCH --nproc "$NPROC" -- $B allreduce --tp "$NPROC" --out "$WORK"
if "$PY" -c "import torch" 2>/dev/null; then
  bench timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" $B allreduce-torch \
    --tp "$NPROC" --out "$WORK"
else
  echo "torch is not installed: no peer figure" | tee -a "$SUMMARY"
fi
fi

echo "== 5. goals" | tee -a "$SUMMARY"
"$PY" $B summary --out "$WORK" 2>&1 | tee -a "$SUMMARY"
# every figure in one file (few files come back from the GPU machine; the logits rows stay behind)
"$PY" -c "
import glob, json, os, sys
json.dump({os.path.basename(p): json.load(open(p)) for p in sorted(glob.glob(sys.argv[1] + '/*.json'))},
          open(sys.argv[2], 'w'), indent=1)" "$WORK" "$OUT/tp_figures.json"
rm -rf "$WORK"
echo "== summary"
cat "$SUMMARY"
