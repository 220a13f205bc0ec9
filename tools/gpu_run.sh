#!/usr/bin/env bash
# Everything nbx checks on the GPU machine, in one call (docs/kernels.md, "GPU runs"):
#   1. the device's facts (tools/measure_nvidia_facts.py)            -> $OUT/nvidia_facts_h200.txt
#   2. tests/gpu and the CPU suites of the backend, in a process where `import torch` raises
#   3. the DLPack-with-torch tests, in a separate process where torch is allowed
#   4. nbx.memory's tools (VMM chunk, H200 allocation trace, pool against torch's allocator), torch allowed
# Logs and results go to $OUT (at most 8 files come back from the GPU machine: this script writes exactly 8).
# Changes no GPU setting.
# Usage: tools/gpu_run.sh [--quick | --tests | --bench | --backend] [extra pytest args for step 2]
#   --quick:   tests/gpu only (no facts, no gpu-marked tests elsewhere, no CPU suites, no torch step)
#   --tests:   every gpu-marked test, torch blocked, and nothing else (GPU_XDIST=N spreads the kernel tests)
#   --bench:   every tools/bench/bench_*.py against torch and host_parts.py, nothing else -> bench_*.txt
#              (settings as served: certified, else a certified neighbour's; the certified-only run is
#              tools/gpu_certify.sh's bench step)
#   --backend: every step but the facts and the gpu-marked kernel tests outside tests/gpu
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/nbx-gpu-run}
mkdir -p "$OUT"
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | tr '\n' ':')${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/nbx-triton-cache}
# tests/conftest.py defaults TRITON_INTERPRET to 1 (kernels on the interp device); here the kernels
# run compiled on the GPU. Triton reads it at import, so it is set before anything starts.
export TRITON_INTERPRET=0
# A launch key without a certificate takes the device file's tile instead of a sweep at first use:
# the suites check results, and a sweep per new key would multiply their time (tests/nbx-autotune
# test the sweep itself).
export NBX_AUTOTUNE_NO_SWEEP=1
PY=${PYTHON:-python3}
QUICK=0
BACKEND_ONLY=0
TESTS_ONLY=0
if [ "${1:-}" = --quick ]; then QUICK=1; shift; fi
if [ "${1:-}" = --tests ]; then QUICK=1; TESTS_ONLY=1; shift; fi
if [ "${1:-}" = --backend ]; then BACKEND_ONLY=1; shift; fi
if [ "${1:-}" = --bench ]; then
  unset NBX_AUTOTUNE_NO_SWEEP  # a benchmark runs what a user's first call would serve
  for bench in tools/bench/bench_*.py tools/bench/host_parts.py; do
    name=$(basename "$bench" .py)
    t0=$(date +%s)
    NBX_AUTOTUNE_REPORT=1 timeout "${BENCH_LIMIT_S:-240}" "$PY" "$bench" > "$OUT/$name.txt" 2>&1
    echo "$bench: exit $? ($(( $(date +%s) - t0 )) s) $(grep '^\[autotune\] certified' "$OUT/$name.txt")"
  done
  exit 0
fi
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

# tools/torch_blocker/nbx_block_torch.py makes `import torch` raise (the machine's own site
# customisation stays in place); loaded as a pytest plugin so xdist's workers have it too.
BLOCKER_DIR="$PWD/tools/torch_blocker"

blocked_pytest() {  # pytest in a process where torch cannot be imported; fails if torch got in anyway
  # (-p nbx_block_torch installs the blocker in xdist's workers too)
  PYTHONPATH="$BLOCKER_DIR:$PYTHONPATH" "$PY" -c "
import sys; sys.path.insert(0, '$BLOCKER_DIR'); import nbx_block_torch
import pytest
code = pytest.main(sys.argv[1:])
leaked = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]
print('torch modules loaded:', leaked or 'none')
sys.exit(code or (3 if leaked else 0))" -p nbx_block_torch "$@"
}

{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.reserved,clocks.max.sm,clocks.max.mem,compute_cap,pci.bus_id --format=csv
  "$PY" -c "import sys, numpy, triton; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'triton', triton.__version__)"
} 2>&1 | tee -a "$SUMMARY"

if [ "$QUICK" = 0 ] && [ "$BACKEND_ONLY" = 0 ]; then
  echo "== 1. device facts" | tee -a "$SUMMARY"
  "$PY" tools/measure_nvidia_facts.py > "$OUT/nvidia_facts_h200.txt" 2> "$OUT/measure_stderr.txt"
  echo "measure_nvidia_facts exit $?" | tee -a "$SUMMARY"
  cat "$OUT/nvidia_facts_h200.txt"
fi

echo "== 2. torch-blocked: every test marked gpu (one process per tests/gpu file: a crash loses one file)" | tee -a "$SUMMARY"
: > "$OUT/gpu_blocked.log"
targets=(tests/gpu/test_*.py)
{ [ "$TESTS_ONLY" = 1 ] || { [ "$QUICK" = 0 ] && [ "$BACKEND_ONLY" = 0 ]; }; } && targets+=(tests/nbx-kernels tests)
for target in "${targets[@]}"; do
  case "$target" in */test_cuda_dlpack_torch.py) continue;; esac
  extra=()
  [ "$target" = tests ] && extra=(--ignore=tests/gpu --ignore=tests/nbx-kernels --continue-on-collection-errors)
  # kernel tests share the GPU well; timing and memory-limit tests do not: only they spread (GPU_XDIST=N)
  [ "$target" = tests/nbx-kernels ] && [ -n "${GPU_XDIST:-}" ] && extra=(-p xdist.plugin -n "$GPU_XDIST")
  echo "-- $target" >> "$OUT/gpu_blocked.log"
  blocked_pytest -q -rfEsP --tb=short -p no:cacheprovider --import-mode=importlib --durations=5 -m gpu \
    "${extra[@]}" "$target" "$@" >> "$OUT/gpu_blocked.log" 2>&1
  code=$?
  echo "$target: exit $code ($(tail -n 2 "$OUT/gpu_blocked.log" | head -n 1))" | tee -a "$SUMMARY"
done
grep -E "^(FAILED|ERROR) " "$OUT/gpu_blocked.log" >> "$SUMMARY"

if [ "$QUICK" = 1 ]; then echo "== summary (quick)"; cat "$SUMMARY"; exit 0; fi

# the simulated-CUDA tests swap the runtime library: a process of their own, apart from real tensors
echo "== 2b. torch-blocked: the backend's CPU-side suites" | tee -a "$SUMMARY"
TRITON_INTERPRET=1 blocked_pytest -q -rs -p no:cacheprovider --import-mode=importlib \
  tests/nbx-devices tests/nbx-core/test_dlpack_cpu.py 2>&1 | tee "$OUT/cpu_blocked.log"
echo "torch-blocked CPU suites exit ${PIPESTATUS[0]}" | tee -a "$SUMMARY"
tail -n 3 "$OUT/cpu_blocked.log" >> "$SUMMARY"
grep -E "^(FAILED|ERROR) " "$OUT/cpu_blocked.log" >> "$SUMMARY"

echo "== 3. torch allowed: DLPack with torch" | tee -a "$SUMMARY"
"$PY" -m pytest -q -rfEs --tb=short -p no:cacheprovider --import-mode=importlib tests/gpu/test_cuda_dlpack_torch.py \
  2>&1 | tee "$OUT/gpu_torch.log"
echo "torch suite exit ${PIPESTATUS[0]}" | tee -a "$SUMMARY"
tail -n 3 "$OUT/gpu_torch.log" >> "$SUMMARY"
grep -E "^(FAILED|ERROR) " "$OUT/gpu_torch.log" >> "$SUMMARY"

echo "== 4. torch allowed: nbx.memory's tools, each in a process of its own" | tee -a "$SUMMARY"
# -> $OUT/memory_tools.log (all three) and $OUT/h200_decode_trace.tsv (to ship in nbx/memory/traces/)
MEMLOG="$OUT/memory_tools.log"
: > "$MEMLOG"
run_tool() {  # name, time limit in seconds, command...
  local name=$1 limit=$2 t0
  shift 2
  t0=$(date +%s)
  echo "-- $name: $*" >> "$MEMLOG"
  timeout "$limit" "$@" >> "$MEMLOG" 2>&1
  echo "$name: exit $? ($(( $(date +%s) - t0 )) s)" | tee -a "$SUMMARY"
}
run_tool measure_vmm_chunk 60 "$PY" tools/measure_vmm_chunk.py
run_tool record_trace 120 "$PY" tools/record_trace.py --out "$OUT/h200_decode_trace.tsv" --budget-s 45
run_tool memory_vs_torch 150 "$PY" tools/bench/memory_vs_torch.py --trace "$OUT/h200_decode_trace.tsv"
# the summary keeps the tables and the YAML fact; the pool's memory summary and the JSON stay in the log
grep -vE "^results \(JSON\)" "$MEMLOG" | grep -vE "^(memory summary|allocated  |requested  |reserved  |cached  |\
segments  |fragmentation  |allocations / frees|driver calls  |refusals / OOM|  (waiting on|largest free|range mapped)| +now +)" \
  >> "$SUMMARY"

echo "== summary"
cat "$SUMMARY"
