"""Whether this machine has the two CUDA devices the multi-GPU tests need (tests/gpu/test_nccl_*.py)."""
from __future__ import annotations


def two_devices_reason() -> str | None:
    """None when two CUDA devices can be counted; else why the two-GPU tests are skipped."""
    try:
        from nbx.devices.nvidia import runtime
        count = runtime.device_count()
    except Exception as exc:   # no CUDA runtime or no driver on this machine
        return f"needs 2 CUDA devices; none can be counted here: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    if count >= 2:
        return None
    return f"needs 2 CUDA devices, found {count}: a two-GPU machine (nvidia-h200-x2) runs it through tools/nccl_run.sh"
