"""llama.cpp's own dequantization of every GGUF block type corral serves, on blocks made here.

Usage: gguf_blocks.py OUT.gguf

Writes one small GGUF (gguf-py's writer) holding, for each type T, a tensor `q.T` of 4 rows of
512 values in T's raw blocks (deterministic random bytes, with every f16 scale field set to a
normal value between 2^-12 and 2^-3 and every MXFP4 exponent between 110 and 129), and a tensor
`ref.T` (F32, same shape) with gguf-py's `gguf.quants.dequantize` of it: llama.cpp's reference
dequantization. corral's test (worker/src/gguf/blocks/tests.rs) reads the file through its own
GGUF reader and compares. Runs in regenerate.sh's venv with gguf 0.19.0 and numpy 2.4.6.
"""

import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

ROWS, COLUMNS = 4, 512

# Byte offsets of each type's f16 fields in a block; minimums are kept positive.
F16_FIELDS = {
    T.Q4_0: [(0, False)],
    T.Q4_1: [(0, True), (2, False)],
    T.Q5_0: [(0, False)],
    T.Q5_1: [(0, True), (2, False)],
    T.Q8_0: [(0, False)],
    T.Q2_K: [(80, True), (82, True)],
    T.Q3_K: [(108, False)],
    T.Q4_K: [(0, True), (2, True)],
    T.Q5_K: [(0, True), (2, True)],
    T.Q6_K: [(208, False)],
    T.IQ4_NL: [(0, False)],
    T.IQ4_XS: [(0, False)],
    T.MXFP4: [],
}


def blocks(qtype: T, rng: np.random.Generator) -> np.ndarray:
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    count = ROWS * COLUMNS // block_values
    raw = rng.integers(0, 256, size=(count, block_bytes), dtype=np.uint8)
    for at, positive in F16_FIELDS[qtype]:
        exponent = rng.integers(3, 13, size=count).astype(np.uint16)
        mantissa = rng.integers(0, 1024, size=count).astype(np.uint16)
        sign = np.zeros(count, np.uint16) if positive else rng.integers(0, 2, size=count).astype(np.uint16)
        bits = (sign << 15) | (exponent << 10) | mantissa
        raw[:, at : at + 2] = bits.astype("<u2").view(np.uint8).reshape(count, 2)
    if qtype == T.MXFP4:
        raw[:, 0] = rng.integers(110, 130, size=count, dtype=np.uint8)
    return raw.reshape(ROWS, -1)


def main() -> None:
    out = sys.argv[1]
    rng = np.random.default_rng(29)
    writer = gguf.GGUFWriter(out, "corral-blocks")
    for qtype in F16_FIELDS:
        raw = blocks(qtype, rng)
        values = dequantize(raw, qtype).astype(np.float32)
        assert values.shape == (ROWS, COLUMNS), values.shape
        writer.add_tensor(f"q.{qtype.name}", raw, raw_dtype=qtype)
        writer.add_tensor(f"ref.{qtype.name}", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
