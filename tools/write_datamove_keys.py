"""Write the `datamove` keys (the remap copy's tile) that the H200 benchmark and model shapes form,
without a GPU: certificates/keys/nvidia-h200-140gb-datamove.json.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_datamove_keys.py

A datamove key is a function of a call's layouts (nbx.kernels.copies.remap.call_dims, then
key_inputs, classed by the device file's ladders through nbx.autotune.keys.form), so it is listed
from the shapes: tools/bench/bench_datamove.py's cases (bf16 (8192, 16384): concat (its parts one launch, keyed on the output)
along axis 1, pad constant (1,1,1,1), pad reflect (3,3), flip, roll, the transpose (its keys are
`datamove_transpose`'s), a [32, 4096, 128] head transpose, a KV-cache append) and the decode layouts of the models nbx runs (Llama-3.2-1B, 3-8B:
KV appends of 8 and 32 heads at contexts 512 to 8192, their head transposes). take's and the sampling
step's keys are tools/write_gather_keys.py's and tools/write_sampling_keys.py's.
"""
from __future__ import annotations

from math import prod

from nbx.autotune import records
from nbx.core import dtypes
from nbx.core.layout import contiguous_strides
from nbx.kernels.copies.concat import grouped, parts_of
from nbx.kernels.copies.kernel import CONSTANT, COPY, FLIP, REFLECT, ROLL
from nbx.kernels.copies.remap import call_dims, key_inputs
from nbx.kernels.copies.tuning import DATAMOVE, DATAMOVE_TRANSPOSE

from keys_files import h200_facts, key_record, keys_path, save_keys

WORD = dtypes.uint16   # bf16 and f16 move as 16-bit words
BIG = (8192, 16384)


def dense(shape):
    return tuple(shape), contiguous_strides(tuple(shape))


def call(mode, out_shape, src_shape, params, out_strides=None, src_strides=None):
    """(mode, dims) of one remap launch: dense layouts unless strides are given."""
    out_strides = out_strides or contiguous_strides(tuple(out_shape))
    src_strides = src_strides or contiguous_strides(tuple(src_shape))
    return mode, call_dims(mode, tuple(out_shape), out_strides, tuple(src_shape), src_strides, params)


def concat_parts(shapes, axis):
    """The key of concat(parts, axis) of dense parts: one launch a group of four (copies/concat.py),
    keyed on the whole output and its widest part."""
    total = list(shapes[0])
    total[axis] = sum(s[axis] for s in shapes)
    parts = parts_of(tuple(total), contiguous_strides(tuple(total)),
                     [(tuple(s), contiguous_strides(tuple(s))) for s in shapes], axis)
    assert grouped(parts), shapes
    return [dict(n=prod(total), inner=max(p.width for p in parts), dtype=WORD, mapped=False, transposed=False)]


def head_transpose(heads, seq, dim):
    """[heads, seq, dim].permute(1, 0, 2).contiguous(): a copy of rows of dim."""
    return call(COPY, (seq, heads, dim), (seq, heads, dim), (0, 0, 0), src_strides=(dim, seq * dim, 1))


def calls():
    rows, cols = BIG
    found = concat_parts([(rows // 2, cols), (rows // 2, cols)], 1)
    found += [call(CONSTANT, (rows + 2, cols + 2), BIG, (1, 1)), call(REFLECT, (rows, cols + 6), BIG, (0, 3)),
              call(FLIP, BIG, BIG, (0, 1)), call(ROLL, BIG, BIG, (0, 7)), head_transpose(32, 4096, 128),
              call(COPY, (cols, rows), (cols, rows), (0, 0), src_strides=(1, cols))]   # x.T.contiguous()
    for heads, dim in ((32, 128), (8, 128), (8, 64), (32, 64)):
        for context in (512, 2048, 4096, 8192):
            found += concat_parts([(heads, context, dim), (heads, 1, dim)], 1)
            found.append(head_transpose(heads, context, dim))
    return found


def main() -> int:
    facts = h200_facts()
    recs = []
    for found in calls():
        fields = found if isinstance(found, dict) else key_inputs(*found, WORD)
        tunable = DATAMOVE_TRANSPOSE if fields["transposed"] else DATAMOVE
        recs.append(key_record(facts, tunable, **fields))
    save_keys(keys_path("datamove"), records.merge(recs), facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
