"""Write the `fft` keys tools/bench/bench_fft.py forms on the H200, without a GPU:
certificates/keys/nvidia-h200-140gb-fft.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_fft_keys.py

An fft key is the transform length n and the rows (nbx.kernels.fft.tuning.fft_key, classed by the
device file's dims ladder): the benchmark's rfft and irfft of 2**22 points as rows x n for n = 2**10
.. 2**20, and Whisper's stft (30 s of 16 kHz audio, n_fft 400, hop 160: 3001 frames of 400 points).
"""
from __future__ import annotations

from pathlib import Path

from nbx.autotune import keys, records
from nbx.core import device_files
from nbx.kernels.fft.tuning import FFT, fft_key

ROOT = Path(__file__).resolve().parents[1]
CLASS, COMPILER = "nvidia-h200-140gb", "triton-3.6.0-cuda"   # the H200's, as in certificates/keys/
POINTS = 1 << 22
WHISPER = (400, 1 + 30 * 16000 // 160)


def main() -> int:
    facts = device_files.for_arch("sm_90")
    calls = [(1 << e, POINTS >> e) for e in (10, 12, 14, 16, 18, 20)] + [WHISPER]
    recs = []
    for n, rows in calls:
        key = keys.form("fft", FFT.key_fields, facts, **fft_key(n, rows))
        recs.append(records.KeyRecord("fft", str(key), facts.name, CLASS, COMPILER, dict(key.observed)))
    recs = records.merge(recs)
    path = ROOT / "certificates" / "keys" / f"{CLASS}-fft.json"
    path.unlink(missing_ok=True)
    records.save(path, recs)
    kept = sum(len(FFT.candidates(facts, keys.representative(
        keys.parse("fft", FFT.key, r.key, facts, r.observed), FFT.key, facts))[0]) for r in recs)
    print(f"{path.relative_to(ROOT)}: {len(recs)} keys, {kept} candidates")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
