# Sourced by tools/nccl_run.sh and tools/nccl_models_run.sh: the environment every multi-GPU process
# runs in. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and PyTorch's / NVSHMEM's switches), as the
# device README asks; the repository's sources on PYTHONPATH; compiled (not interpreted) Triton.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | tr '\n' ':')${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 TRITON_INTERPRET=0
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/nbx-triton-cache}
PY=${PYTHON:-python3}
NPROC=${NPROC:-$(nvidia-smi -L 2>/dev/null | wc -l)}
