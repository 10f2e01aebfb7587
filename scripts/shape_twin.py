"""A GGUF of the same shape, quantization and vocabulary as another, with random weights.

A decode step's cost depends on a model's shapes and tensor types, not on its weights, so this
twin times like the real model where the real file can't go (the GPU machines here take 64 MiB
per call; the 1.5B is 1.1 GB): the header (metadata, vocabulary, tensor table; about 6 MB) is
copied verbatim and the tensor data is drawn at random, with each block's scale set so that the
weights are small and zero-mean (the text it writes is noise, so acceptance rates mean nothing).

    python scripts/shape_twin.py MODEL.gguf --header-only HEADER   # here: the header alone
    python scripts/shape_twin.py HEADER TWIN.gguf                   # there: the twin
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.models.hub.gguf_header import GGML_TYPES, parse_header  # noqa: E402

# ggml type -> (byte offset of the f16 scale in a block, its value, the f16 second scale's
# offset and value or None). Quants are random bytes; these keep |w| below ~0.1, mean ~0.
SCALES = {
    12: (0, 1e-4, 2, 7.5e-4),  # Q4_K: d, dmin (w = d*sc*q - dmin*m; 7.5 = mean q, so mean 0)
    14: (208, 2e-5, None, None),  # Q6_K: d at the block's end (w = d*sc*(q - 32))
    8: (0, 2e-4, None, None),  # Q8_0: w = d*q
    6: (0, 2e-3, None, None),  # Q5_0: w = d*(q - 16)
}


def tensor_data(name: str, ggml_type: int, n_bytes: int, rng: np.random.Generator) -> bytes:
    if ggml_type == 0:  # F32: norms are 1, biases 0
        return np.full(n_bytes // 4, 1.0 if "norm" in name else 0.0, np.float32).tobytes()
    if ggml_type not in SCALES:
        raise SystemExit(f"shape_twin: tensor {name} has ggml type {ggml_type}, which this script can't fill")
    block = GGML_TYPES[ggml_type][1]
    data = np.frombuffer(rng.bytes(n_bytes), np.uint8).reshape(-1, block).copy()
    at, value, at2, value2 = SCALES[ggml_type]
    data[:, at:at + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    if at2 is not None:
        data[:, at2:at2 + 2] = np.frombuffer(np.float16(value2).tobytes(), np.uint8)
    return data.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a GGUF, or a header written by --header-only")
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--header-only", type=Path, help="write the source's header here and stop")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with args.source.open("rb") as f:
        head = f.read(64 << 20)
    h = parse_header(head)
    if args.header_only:
        args.header_only.write_bytes(head[:h.data_offset])
        return
    if args.out is None:
        ap.error("the twin's path is needed")
    rng = np.random.default_rng(args.seed)
    align = h.metadata.get("general.alignment", 32)
    with args.out.open("wb") as out:
        out.write(head[:h.data_offset])
        pos = 0
        for t in sorted(h.tensors, key=lambda t: t.offset):
            out.write(b"\0" * (t.offset - pos))
            out.write(tensor_data(t.name, t.ggml_type, t.n_bytes, rng))
            pos = t.offset + t.n_bytes
        out.write(b"\0" * (-pos % align))
    print(f"{args.out}: {len(h.tensors)} tensors, {h.data_offset + pos} bytes")


if __name__ == "__main__":
    main()
