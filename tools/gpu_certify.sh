#!/usr/bin/env bash
# Certify nbx's autotuned kernels on this machine's GPU, as docs/autotune.md ("Certifying the
# H200") describes, and prove the result with a certified-only benchmark run:
#   record-bench  the launch keys of the benchmarks (each case once, NBX_BENCH_ONCE=1) -> keys_bench.json
#   record-tests  the launch keys of the gpu-marked kernel tests (torch blocked)       -> keys_tests.json
#   certify  the keys files there are (the benchmarks' first; KEYS="f1 f2" names others, such as
#            certificates/keys/nvidia-h200-140gb.json; "f1:240" gives that file at most 240 s of its own)
#            until CERTIFY_DEADLINE (epoch seconds) or for CERTIFY_LIMIT_S; the candidates are compiled
#            first in COMPILE_JOBS processes (default 8), which takes 150-220 s for about 700 candidates
#            with 16 jobs and times nothing until done: give a file a limit it can finish in; what was
#            proven stays (--missing resumes; MISSING_FLAG= certifies again); then check and coverage
#                                                                     -> certify.log, certificates.tgz
#   loss     tools/bench/bucket_loss.py over LOSS_FAMILIES (default elementwise,softmax,norm,reduction),
#            LOSS_KEYS keys a family (default 1), representatives of at most LOSS_MAX_ELEMENTS (default
#            2^26; MoE layers need 2^36), moving only LOSS_FIELDS (names, default every size field:
#            a MoE key's tokens alone keep its neighbours few), for at most LOSS_LIMIT_S (default 200): its lines
#            print as they are timed, so a cut run keeps what it measured      -> bucket_loss.txt
#   models   the launch keys of the model shapes' censuses (MODELS, default "1b 8b qwen7b": tools/bench/
#            model_shapes.py; PROMPTS, default 512; NEW_TOKENS, default 256; BATCHES, default 1), the keys
#            not certified yet, until CERTIFY_LIMIT_S; then check and each census's coverage -> certificates.tgz
#   bench    the benchmarks (BENCH_FILES="a.py b.py" picks some) in certified-only mode over those
#            certificates, with the report line
#                                                                      -> bench_*.txt
#   times    every certified key timed again (the certifier's method, other flushes, back to back)
#            against its best_ms (tools/bench/certified_times.py)       -> certified_times.txt
# Usage: tools/gpu_certify.sh [record-bench] [record-tests] [certify] [models] [loss] [bench] [times]
#        (no argument: all but loss, in order)
# A carried tc.tgz (tools/triton_cache_pack.py's, from an earlier call's $OUT; ignored by git: name it
# in the device call's carry) is unpacked into the Triton cache first, and the cache is packed into
# $OUT/tc.tgz at the end: each call starts a fresh machine, and compiling is most of a certifying call's time.
# At most 8 files come back from the GPU machine and none deeper than two folders: the certificate
# tree travels as certificates.tgz (unpack it into certificates/ of the repository); the steps of one
# call must write no more (bench writes one a benchmark: BENCH_FILES, or a call of its own). Changes no GPU setting.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/nbx-certify}
mkdir -p "$OUT"
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | tr '\n' ':')${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 TRITON_INTERPRET=0
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/nbx-triton-cache}
PY=${PYTHON:-python3}
CLASS=${DEVICE_CLASS:-nvidia-h200-140gb}
CERTS=${CERTS:-/tmp/nbx-certificates}   # unpacked tree: a carried certificates_run.tgz seeds it, else the shipped one
LOG="$OUT/certify.log"
BENCHES=(${BENCH_FILES:-tools/bench/bench_elementwise.py tools/bench/bench_softmax_norm.py tools/bench/bench_reduction.py tools/bench/bench_matmul.py})
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(record-bench record-tests certify bench times)
nbx() { "$PY" -m nbx.core.cli "$@"; }
# `nbx autotune certify` for at most $1 seconds into $CERTS, the rest its arguments; the timing process
# runs with `import torch` blocked (its compile shards are plain processes)
certify_for() {
  local limit=$1; shift
  PYTHONPATH="$PWD/tools/torch_blocker:$PYTHONPATH" timeout "$limit" "$PY" -c \
    "import nbx_block_torch, runpy; runpy.run_module('nbx.core.cli', run_name='__main__')" \
    autotune certify --device-class "$CLASS" --out "$CERTS" --compile-jobs "${COMPILE_JOBS:-8}" "$@" >> "$LOG" 2>&1
}
mkdir -p "$CERTS" "$TRITON_CACHE_DIR"
[ -f tc.tgz ] && tar xzf tc.tgz -C "$TRITON_CACHE_DIR"
if [ -f certificates_run.tgz ]; then
  tar xzf certificates_run.tgz -C "$CERTS"   # carried from an earlier call
else   # the shipped tree, so that --missing proves only the keys it lacks
  cp -r certificates/nvidia "$CERTS"/
fi

for step in "${STEPS[@]}"; do
  case "$step" in
  record-bench)
    echo "== record the benchmarks' keys $(date -u +%T)" | tee -a "$LOG"
    for bench in "${BENCHES[@]}"; do
      NBX_BENCH_ONCE=1 nbx autotune record --out "$OUT/keys_bench.json" -- "$PY" "$bench" >> "$LOG" 2>&1
      echo "record $bench: exit $? ($(tail -n 1 "$LOG"))" | tee -a "$LOG"
    done
    ;;
  record-tests)
    echo "== record the kernel tests' keys $(date -u +%T)" | tee -a "$LOG"
    PYTHONPATH="$PWD/tools/torch_blocker:$PYTHONPATH" nbx autotune record --out "$OUT/keys_tests.json" -- \
      "$PY" -m pytest -q -m gpu -p nbx_block_torch -p xdist.plugin -n "${GPU_XDIST:-8}" -p no:cacheprovider \
      --import-mode=importlib tests/nbx-kernels >> "$LOG" 2>&1
    echo "record tests/nbx-kernels: exit $? ($(tail -n 1 "$LOG"))" | tee -a "$LOG"
    ;;
  certify)
    echo "== certify $(date -u +%T)" | tee -a "$LOG"
    deadline=${CERTIFY_DEADLINE:-$(( $(date +%s) + ${CERTIFY_LIMIT_S:-300} ))}  # epoch seconds, or a limit
    for item in ${KEYS:-"$OUT/keys_bench.json" "$OUT/keys_tests.json"}; do
      keys=${item%%:*}; own=${item#"$keys"}; own=${own#:}
      [ -f "$keys" ] || continue
      left=$(( deadline - $(date +%s) ))
      [ -n "$own" ] && [ "$own" -lt "$left" ] && left=$own
      [ "$left" -le 5 ] && { echo "certify $keys: no time left" | tee -a "$LOG"; continue; }
      certify_for "$left" --keys "$keys" ${MISSING_FLAG---missing}
      echo "certify $keys: exit $? ($(grep -c '^\[' "$LOG") progress lines so far)" | tee -a "$LOG"
    done
    nbx autotune check "$CERTS" 2>&1 | tail -n 3 | tee -a "$LOG"
    for item in ${KEYS:-"$OUT/keys_bench.json" "$OUT/keys_tests.json"}; do
      keys=${item%%:*}
      [ -f "$keys" ] || continue
      nbx autotune coverage --keys "$keys" --certificates "$CERTS" > "$OUT/coverage.tmp" 2>&1
      echo "coverage $keys: exit $?; $(grep -c '^missing' "$OUT/coverage.tmp") missing; $(tail -n 1 "$OUT/coverage.tmp")" \
        | tee -a "$LOG"
    done
    rm -f "$OUT/coverage.tmp"
    tar czf "$OUT/certificates.tgz" -C "$CERTS" .
    ;;
  models)
    echo "== certify the model shapes' censuses $(date -u +%T)" | tee -a "$LOG"
    deadline=${CERTIFY_DEADLINE:-$(( $(date +%s) + ${CERTIFY_LIMIT_S:-300} ))}
    for shape in ${MODELS:-1b 8b qwen7b}; do
      left=$(( deadline - $(date +%s) ))
      [ "$left" -le 5 ] && { echo "certify $shape: no time left" | tee -a "$LOG"; continue; }
      config="/tmp/nbx-census-$shape"; mkdir -p "$config"
      (cd tools/bench && "$PY" model_shapes.py "$shape") > "$config/config.json"
      certify_for "$left" --model "$config" --prompt "${PROMPTS:-512}" --new-tokens "${NEW_TOKENS:-256}" \
        --batch "${BATCHES:-1}" --missing
      echo "certify $shape: exit $?" | tee -a "$LOG"
    done
    nbx autotune check "$CERTS" 2>&1 | tail -n 3 | tee -a "$LOG"
    for shape in ${MODELS:-1b 8b qwen7b}; do
      echo "coverage $shape: $(nbx autotune coverage --model "/tmp/nbx-census-$shape" --prompt "${PROMPTS:-512}" \
        --new-tokens "${NEW_TOKENS:-256}" --batch "${BATCHES:-1}" --arch sm_90 --device-class "$CLASS" \
        --compiler "triton-$("$PY" -c "import triton; print(triton.__version__)")-cuda" \
        --certificates "$CERTS" 2>&1 | tail -n 1)" | tee -a "$LOG"
    done
    tar czf "$OUT/certificates.tgz" -C "$CERTS" .
    ;;
  bench)
    echo "== certified-only benchmarks $(date -u +%T)" | tee -a "$LOG"
    for bench in "${BENCHES[@]}"; do
      name=$(basename "$bench" .py)
      NBX_AUTOTUNE_CERTIFICATES="$CERTS" NBX_AUTOTUNE_CERTIFIED_ONLY=1 NBX_AUTOTUNE_REPORT=1 \
        "$PY" "$bench" > "$OUT/$name.txt" 2>&1
      echo "$bench: exit $?; $(grep '^\[autotune\] certified' "$OUT/$name.txt")" | tee -a "$LOG"
    done
    ;;
  loss)
    echo "== bucket losses $(date -u +%T)" | tee -a "$LOG"
    timeout "${LOSS_LIMIT_S:-200}" "$PY" tools/bench/bucket_loss.py --compile-jobs "${COMPILE_JOBS:-8}" \
      --families "${LOSS_FAMILIES:-elementwise,softmax,norm,reduction}" --keys-per-family "${LOSS_KEYS:-1}" \
      --max-elements "${LOSS_MAX_ELEMENTS:-67108864}" ${LOSS_FIELDS:+--fields "$LOSS_FIELDS"} \
      > "$OUT/bucket_loss.txt" 2>&1
    echo "bucket_loss: exit $?; $(grep -c '%$' "$OUT/bucket_loss.txt") line(s)" | tee -a "$LOG"
    ;;
  times)
    echo "== certified times $(date -u +%T)" | tee -a "$LOG"
    NBX_AUTOTUNE_CERTIFICATES="$CERTS" "$PY" tools/bench/certified_times.py > "$OUT/certified_times.txt" 2>&1
    echo "certified_times: exit $?; $(grep '^#' "$OUT/certified_times.txt")" | tee -a "$LOG"
    ;;
  *) echo "unknown step $step (record-bench, record-tests, certify, models, loss, bench, times)"; exit 2;;
  esac
done
"$PY" tools/triton_cache_pack.py --cache "$TRITON_CACHE_DIR" --out "$OUT/tc.tgz" --max-mib "${CACHE_MIB:-11.5}" \
  | tail -n 1 | tee -a "$LOG"
