#!/usr/bin/env bash
# The two-GPU run of nbx's multi-GPU layer (issue 7), on nvidia-h200-x2; docs/multi_gpu.md says what
# each step must show. Everything lands in $OUT (7 files; at most 8 come back from the GPU machine):
#   0. the machine: GPUs, how they are linked (nvidia-smi topo -m), Python, NCCL's library and version
#   1. the CPU suites of the NCCL layer (fake libnccl, simulated GPUs; seconds)     -> nccl_cpu.log
#   2. tests/gpu/test_nccl_*.py in a process where `import torch` raises: two-device correctness in
#      one process, then collectives / unique id by env / tensor-parallel / bus bandwidth, each test
#      starting one process per GPU through nbx.devices.nvidia.nccl_launch            -> nccl_gpu.log
#   3. all_reduce of 256 MiB (float32, sum): one process per GPU through nccl_launch, the unique id
#      passed by a file; busbw = algbw * 2(n-1)/n as nccl-tests computes it   -> busbw_nbx.json/.log
#   4. the same measurement through torch.distributed (NCCL as well), the named peer, where torch
#      is installed                                                          -> busbw_torch.json/.log
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and PyTorch's / NVSHMEM's switches), as the device
# README asks: a program using it can put the host's shared GPUs out of service. Changes no GPU setting.
# Usage: OUT=/some/dir tools/nccl_run.sh        (NPROC=n to use n GPUs; default: every GPU listed)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/nbx-nccl-run}
mkdir -p "$OUT"
. tools/nccl_env.sh
SUMMARY="$OUT/nccl_summary.txt"
: > "$SUMMARY"
WORK=$(mktemp -d)

{
  echo "== 0. $(date -u +%FT%TZ) $(hostname), NPROC=$NPROC, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv
  nvidia-smi topo -m
  "$PY" -c "
import sys, numpy
from nbx.devices.nvidia import nccl_library, runtime
lib = nccl_library.nccl()
print('python', sys.version.split()[0], 'numpy', numpy.__version__)
print('NCCL', lib.version_text, 'from', lib.path)
n = runtime.device_count()
print('cuda devices', n, 'peer access', [(a, b, runtime.can_access_peer(a, b)) for a in range(n) for b in range(n) if a != b])"
} 2>&1 | tee -a "$SUMMARY"

echo "== 1. CPU suites of the NCCL layer" | tee -a "$SUMMARY"
"$PY" -m pytest -q -p no:cacheprovider --import-mode=importlib tests/nbx-devices/test_nccl_*.py \
  > "$OUT/nccl_cpu.log" 2>&1
code=$?
echo "exit $code ($(tail -n 1 "$OUT/nccl_cpu.log"))" | tee -a "$SUMMARY"

echo "== 2. tests/gpu/test_nccl_*.py, torch blocked in the pytest process (ranks block it themselves)" | tee -a "$SUMMARY"
cat > "$WORK/nbx_block_torch.py" <<'EOF'
import sys

class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"import of {name!r} blocked: the nbx GPU suite runs without torch", name=name)
        return None

sys.meta_path.insert(0, BlockTorch())
EOF
: > "$OUT/nccl_gpu.log"
for target in tests/gpu/test_nccl_two_devices.py tests/gpu/test_nccl_collectives.py; do
  echo "-- $target" >> "$OUT/nccl_gpu.log"
  "$PY" -c "
import sys; sys.path.insert(0, '$WORK'); import nbx_block_torch
import pytest
code = pytest.main(sys.argv[1:])
leaked = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]
print('torch modules loaded:', leaked or 'none')
sys.exit(code or (3 if leaked else 0))" -q -rfEsP --tb=short -p no:cacheprovider --import-mode=importlib \
    --durations=10 -m gpu "$target" >> "$OUT/nccl_gpu.log" 2>&1
  code=$?
  echo "$target: exit $code ($(grep -E ' in [0-9.]+s' "$OUT/nccl_gpu.log" | tail -n 1))" | tee -a "$SUMMARY"
done
grep -E "^(FAILED|ERROR) |^SKIPPED" "$OUT/nccl_gpu.log" >> "$SUMMARY"

echo "== 3. nbx: all_reduce of 256 MiB, one process per GPU (nccl_launch, unique id by file)" | tee -a "$SUMMARY"
mkdir -p "$WORK/busbw"
"$PY" -m nbx.devices.nvidia.nccl_launch --nproc "$NPROC" --id-via file --timeout 300 --log-dir "$WORK/busbw" \
  -- tests/gpu/test_nccl_collectives.py busbw "$WORK/busbw" 2>&1 | tee -a "$SUMMARY"
cat "$WORK"/busbw/rank*.log > "$OUT/busbw_nbx.log" 2>/dev/null
"$PY" - "$WORK/busbw" "$OUT/busbw_nbx.json" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import glob, json, sys
reports = [json.load(open(p)) for p in sorted(glob.glob(f"{sys.argv[1]}/busbw_rank*.json"))]
json.dump(reports, open(sys.argv[2], "w"), indent=1)
if not reports:
    sys.exit("no rank report: see busbw_nbx.log")
n, size = reports[0]["world_size"], reports[0]["bytes"]
for mode in ("out-of-place", "in-place"):
    ms = max(r[mode]["ms"] for r in reports)   # the slowest rank bounds the collective
    algbw = size / (ms * 1e-3) / 1e9
    print(f"nbx {mode}: {size} bytes, {n} ranks, {ms:.3f} ms, algbw {algbw:.1f} GB/s, "
          f"busbw {algbw * 2 * (n - 1) / n:.1f} GB/s; sums right: {all(r['sum_ok'] for r in reports)}")
EOF

echo "== 4. peer: torch.distributed all_reduce of 256 MiB (torch allowed here, in its own processes)" | tee -a "$SUMMARY"
if "$PY" -c "import torch" 2>/dev/null; then
  cat > "$WORK/torch_busbw.py" <<'EOF'
import json, os, sys
import torch
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
size, iters = 256 << 20, 20
x = torch.ones(size // 4, device="cuda")
z = torch.zeros(size // 4, device="cuda")
for _ in range(5):
    dist.all_reduce(z)
report = {"bytes": size, "iters": iters, "world_size": world, "nccl": list(torch.cuda.nccl.version())}
for mode in ("in-place",):   # torch's all_reduce writes into its input
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dist.all_reduce(z)
    end.record()
    end.synchronize()
    report[mode] = {"ms": start.elapsed_time(end) / iters}
dist.all_reduce(x)
report["sum_ok"] = bool((x == world).all() and (z == 0).all())
with open(os.path.join(sys.argv[1], f"torch_rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
EOF
  timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" "$WORK/torch_busbw.py" "$WORK" \
    > "$OUT/busbw_torch.log" 2>&1
  echo "torch run exit $?" | tee -a "$SUMMARY"
  "$PY" - "$WORK" "$OUT/busbw_torch.json" "$OUT/busbw_nbx.json" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import glob, json, sys
reports = [json.load(open(p)) for p in sorted(glob.glob(f"{sys.argv[1]}/torch_rank*.json"))]
json.dump(reports, open(sys.argv[2], "w"), indent=1)
if not reports:
    sys.exit("no torch rank report: see busbw_torch.log")
n, size = reports[0]["world_size"], reports[0]["bytes"]
ms = max(r["in-place"]["ms"] for r in reports)
algbw = size / (ms * 1e-3) / 1e9
busbw = algbw * 2 * (n - 1) / n
print(f"torch (NCCL {'.'.join(map(str, reports[0]['nccl']))}) in-place: {ms:.3f} ms, algbw {algbw:.1f} GB/s, "
      f"busbw {busbw:.1f} GB/s; sums right: {all(r['sum_ok'] for r in reports)}")
try:
    ours = json.load(open(sys.argv[3]))
    ours_ms = max(r["in-place"]["ms"] for r in ours)
    print(f"nbx / torch in-place busbw: {ms / ours_ms:.3f} (1.000 = the same; above 1 nbx is faster)")
except (OSError, ValueError, KeyError) as exc:
    print(f"no nbx figure to compare with: {exc}")
EOF
else
  echo "torch is not installed: no peer figure" | tee -a "$SUMMARY"
fi

rm -rf "$WORK"
echo "== summary"
cat "$SUMMARY"
