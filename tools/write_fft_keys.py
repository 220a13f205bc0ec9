"""Write the `fft` keys tools/bench/bench_fft.py forms on the H200, without a GPU:
certificates/keys/nvidia-h200-140gb-fft.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_fft_keys.py

An fft key is the transform length n and the rows (nbx.kernels.fft.tuning.fft_key, classed by the
device file's dims ladder): the benchmark's rfft and irfft of 2**22 points as rows x n for n = 2**10
.. 2**20, and Whisper's stft (30 s of 16 kHz audio, n_fft 400, hop 160: 3001 frames of 400 points).
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.fft.tuning import FFT, fft_key

from keys_files import h200_facts, key_record, keys_path, save_keys
POINTS = 1 << 22
WHISPER = (400, 1 + 30 * 16000 // 160)


def main() -> int:
    facts = h200_facts()
    calls = [(1 << e, POINTS >> e) for e in (10, 12, 14, 16, 18, 20)] + [WHISPER]
    recs = [key_record(facts, FFT, **fft_key(n, rows)) for n, rows in calls]
    save_keys(keys_path("fft"), records.merge(recs), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
