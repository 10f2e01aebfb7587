"""A tiny vision projector GGUF (LLaVA's ``mlp`` type) with seeded random weights, for tests.

No vision model's weights reach these machines, so the tests build their projector: a real
projector type that libmtmd loads, preprocesses for and encodes with (a 2-layer ViT on 32x32
pixels in 8x8 patches: 16 image tokens), sized to a real text model's embedding width (576 for
SmolLM2-135M, 896 for Qwen2.5-0.5B, 1536 for the 1.5B). Its replies say nothing true about a
picture; every path an image takes (preprocessing, encoder, positions, KV state) runs for real.
The same seed writes the same bytes.

    python scripts/make_test_projector.py OUT.gguf --n-embd 576 [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np

IMAGE_SIZE = 32  # pixels, square (mtmd resizes and pads every picture to it)
PATCH = 8  # -> (32/8)^2 = 16 image tokens
WIDTH = 64  # the vision tower's width
HEADS = 2
FFN = 128
LAYERS = 2  # LLaVA reads the second-to-last layer: one layer runs


def write(path: Path, n_embd: int, seed: int = 0) -> Path:
    """Write the projector to ``path`` for a text model of embedding width ``n_embd``."""
    rng = np.random.default_rng(seed)

    def weights(*shape: int, scale: float = 0.05) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.name", f"duet-test-projector-{n_embd}")
    w.add_string("general.description", "seeded random weights for Duet's tests (not a real model)")
    w.add_uint32("general.file_type", 0)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    w.add_uint32("clip.vision.patch_size", PATCH)
    w.add_uint32("clip.vision.embedding_length", WIDTH)
    w.add_uint32("clip.vision.feed_forward_length", FFN)
    w.add_uint32("clip.vision.projection_dim", n_embd)
    w.add_uint32("clip.vision.attention.head_count", HEADS)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.vision.block_count", LAYERS)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    n_pos = (IMAGE_SIZE // PATCH) ** 2
    # numpy shapes are ggml's ne reversed: a (out, in) matrix multiplies a row of ``in``
    w.add_tensor("v.patch_embd.weight", weights(WIDTH, 3, PATCH, PATCH).astype(np.float16))
    w.add_tensor("v.patch_embd.bias", weights(WIDTH))
    w.add_tensor("v.position_embd.weight", weights(n_pos, WIDTH))
    w.add_tensor("v.pre_ln.weight", np.ones(WIDTH, np.float32))
    w.add_tensor("v.pre_ln.bias", np.zeros(WIDTH, np.float32))
    for i in range(LAYERS):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", weights(WIDTH, WIDTH))
            w.add_tensor(f"v.blk.{i}.{name}.bias", weights(WIDTH))
        for name in ("ln1", "ln2"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", np.ones(WIDTH, np.float32))
            w.add_tensor(f"v.blk.{i}.{name}.bias", np.zeros(WIDTH, np.float32))
        w.add_tensor(f"v.blk.{i}.ffn_up.weight", weights(FFN, WIDTH))
        w.add_tensor(f"v.blk.{i}.ffn_up.bias", weights(FFN))
        w.add_tensor(f"v.blk.{i}.ffn_down.weight", weights(WIDTH, FFN))
        w.add_tensor(f"v.blk.{i}.ffn_down.bias", weights(WIDTH))
    w.add_tensor("mm.0.weight", weights(n_embd, WIDTH))
    w.add_tensor("mm.0.bias", weights(n_embd))
    w.add_tensor("mm.2.weight", weights(n_embd, n_embd, scale=0.02))
    w.add_tensor("mm.2.bias", weights(n_embd, scale=0.02))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--n-embd", type=int, required=True, help="the text model's embedding width")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    write(args.out, args.n_embd, args.seed)


if __name__ == "__main__":
    main()
