"""Tensor-parallel decoding over NCCL on 2 (or NPROC) GPUs (nvidia-h200-x2/-x4; tools/nccl_models_run.sh
runs this file): the CPU checks of tests/nbx-models/test_tensor_parallel.py again, with real ranks.

Each test starts one process per GPU through nbx.devices.nvidia.nccl_launch -- this file run as a
script is the rank's program (`python test_tensor_parallel_gpus.py SCENARIO FOLDER OUTDIR`) -- and
reads the JSON report each rank writes. Ranks block torch's import. Skipped where fewer than two
CUDA devices exist."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from two_gpus import two_devices_reason

ROOT = Path(__file__).resolve().parents[2]
WORLD = int(os.environ.get("NPROC", "2"))
RANK_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "TRITON_INTERPRET": "0", "PYTHONUNBUFFERED": "1"}
PROMPT = [1, 17, 42, 5, 99, 23, 64, 8, 300, 511]
# 16 heads / 4 KV heads: at 2 ranks the KV heads split, at 8 each is replicated on two ranks
CONFIG = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=16, num_key_value_heads=4,
              head_dim=32, num_hidden_layers=4, vocab_size=1024, max_position_embeddings=512)


# ---- the ranks' side ------------------------------------------------------------------------------
def rank_correctness(comm, folder) -> dict:
    import nbx.core as nbx
    from nbx import models
    model = models.load(folder, tensor_parallel=comm.world_size, communicator=comm, timeout=300)
    logits = model.logits(PROMPT).numpy()
    greedy = model.generate(PROMPT, 24)
    sampled = model.generate(PROMPT, 24, temperature=1.0, top_k=50, seed=5)
    report = {"greedy": greedy, "sampled": sampled, "decode": model.last_decode, "bytes_read": model.bytes_read,
              "logits_sum": float(np.float64(logits).sum())}
    if comm.rank == 0:   # the single-GPU run, on rank 0's GPU
        single = models.load(folder, device=comm.device)
        want = single.logits(PROMPT).numpy()
        from nbx.core.reference import deviation
        report.update(single_greedy=single.generate(PROMPT, 24), deviation=deviation(logits, want),
                      tolerance=_tolerance(nbx.bfloat16, comm.device))
    return report


def _tolerance(dtype, device) -> float:
    from nbx.kernels import launch
    return launch.screen_tolerance(dtype, device)


def rank_dies(comm, folder) -> dict:
    from nbx import models
    model = models.load(folder, tensor_parallel=comm.world_size, communicator=comm, timeout=10)
    if comm.rank == comm.world_size - 1:
        os._exit(0)   # gone without a word: its collectives never come
    start = time.monotonic()
    try:
        model.generate(PROMPT, 8)
        return {"error": None}
    except models.TensorParallelError as exc:
        return {"error": type(exc).__name__, "message": str(exc), "after_s": time.monotonic() - start}


SCENARIOS = {"correctness": rank_correctness, "dies": rank_dies}


def rank_main(scenario: str, folder: str, outdir: str) -> None:
    class BlockTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"import of {name!r} blocked: nbx's ranks run without torch", name=name)

    sys.meta_path.insert(0, BlockTorch())
    from nbx.devices.nvidia import nccl
    comm = nccl.Communicator.from_env()
    report = SCENARIOS[scenario](comm, folder)
    report.update(rank=comm.rank, device=str(comm.device),
                  torch_loaded=any(m == "torch" or m.startswith("torch.") for m in sys.modules))
    Path(outdir, f"{scenario}_rank{comm.rank}.json").write_text(json.dumps(report, indent=1))
    if not comm.closed:
        comm.destroy()


# ---- the tests (pytest's side) ---------------------------------------------------------------------
REASON = None if __name__ == "__main__" else two_devices_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from nbx import models
    from nbx.models.writer import small_config
    config = small_config("LlamaForCausalLM", **CONFIG)
    return models.write_checkpoint(tmp_path_factory.mktemp("tp") / "llama", config, seed=21, dtype="bfloat16",
                                   shards=3, device="cuda")


def run_ranks(scenario: str, folder, tmp_path, ranks=None) -> list[dict]:
    from nbx.devices.nvidia import nccl_launch
    env = dict(os.environ, **RANK_ENV)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in sorted(ROOT.glob("packages/*/src"))),
                                         env.get("PYTHONPATH", "")])
    result = nccl_launch.launch([sys.executable, str(Path(__file__).resolve()), scenario, str(folder), str(tmp_path)],
                                WORLD, timeout=420, log_dir=tmp_path, base_env=env)
    logs = "\n".join(f"--- rank {r}\n{(tmp_path / f'rank{r}.log').read_text()[-4000:]}" for r in range(WORLD))
    assert result.exit_code == 0, (f"ranks exited {result.codes} (first failing {result.first_failed}, timed out "
                                   f"{result.timed_out})\n{logs}")
    reports = [json.loads((tmp_path / f"{scenario}_rank{r}.json").read_text()) for r in (ranks or range(WORLD))]
    assert not any(rep["torch_loaded"] for rep in reports)
    return reports


def test_tensor_parallel_ranks_match_the_single_gpu_run_and_agree_on_every_token(folder, tmp_path):
    reports = run_ranks("correctness", folder, tmp_path)
    first = reports[0]
    print(f"\n{WORLD} ranks: logits deviation from one GPU {first['deviation']:.3g} (bfloat16 tolerance "
          f"{first['tolerance']:.3g}); decode path {first['decode']}; bytes read per rank "
          f"{[r['bytes_read'] for r in reports]} of {sum(f.stat().st_size for f in folder.glob('*.safetensors'))}")
    assert first["deviation"] <= first["tolerance"]
    assert first["greedy"] == first["single_greedy"]
    for rep in reports:
        assert rep["greedy"] == first["greedy"] and rep["sampled"] == first["sampled"]
        assert rep["logits_sum"] == first["logits_sum"]          # the same bytes on every rank
        assert rep["bytes_read"] < 0.75 * sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    assert [rep["decode"] for rep in reports] == ["graph"] * WORLD   # the step, collectives in it, replayed


def test_a_rank_that_exits_ends_the_others_with_rank_timeout_error_not_a_hang(folder, tmp_path):
    reports = run_ranks("dies", folder, tmp_path, ranks=range(WORLD - 1))
    for rep in reports:
        print(f"\nrank {rep['rank']}: {rep['error']} after {rep.get('after_s', 0):.1f} s: {rep.get('message')}")
        assert rep["error"] == "RankTimeoutError" and rep["after_s"] < 60


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2], sys.argv[3])
