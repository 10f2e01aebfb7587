"""Which op makes a token's values depend on the batch it was read in?

Reads one chat prompt in one batch ([n]) and in another split (by default [n-1, 1]) in fresh
contexts, records every op's output row for the last token through llama.cpp's graph eval
callback (``cb_eval``), and prints the ops in graph order whose rows differ (the first one is the
culprit; the others inherit its difference). Only 2-D float outputs ([width, tokens]) are
compared: attention's per-head tensors are seen through ``kqv_out``.

    python scripts/batch_ops.py MODEL.gguf [--repack] [--flash-attn] [--split 5,31] [--all] [--gpu-layers -1]

``--save FILE`` keeps both reads' rows (an .npz); ``--against FILE`` compares this build's with
them, op by op: a kernel changed for speed must leave every op's bits where they were (run the
same command on the build before with ``--save`` and on the new one through
``LLAMA_CPP_LIB_PATH`` with ``--against``).

With ``--gpu-layers`` the ops run where llama.cpp puts them (CUDA, Metal) and their rows are
copied back to be compared (``ggml_backend_tensor_get``).

llama.cpp's own switches for its CPU kernels apply, e.g. GGML_CPU_TILED_MM=0 (no tiled K-quant
matmul) or GGML_CPU_TILED_MM_FORCE=1 (the tiled one for every batch size). What it showed on this
machine: docs/benchmarks/exact.md.
"""

from __future__ import annotations

import argparse
import ctypes
import pathlib

import llama_cpp as L  # noqa: N812 - the bindings under their usual short name
import numpy as np

F32 = 0
GGML = ctypes.CDLL(str(pathlib.Path(L.__file__).parent / "lib" / "libggml-base.so"))
GGML.ggml_backend_buffer_is_host.argtypes, GGML.ggml_backend_buffer_is_host.restype = [ctypes.c_void_p], ctypes.c_bool
GGML.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
TEXT = (b"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWrite one sentence about rivers "
        b"and the sea, and why they matter to people who live near them.<|im_end|>\n<|im_start|>assistant\n")


class Tensor(ctypes.Structure):
    """ggml.h's struct ggml_tensor, as far as this needs it (GGML_MAX_DIMS 4, GGML_MAX_SRC 10)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def read(model: int, tokens: list[int], splits: list[int], flash_attn: bool) -> dict[str, np.ndarray]:
    """Every 2-D float op's last row in the last batch of ``splits``, by name#occurrence, in order."""
    rows: dict[str, np.ndarray] = {}
    last = [False]

    @L.ggml_backend_sched_eval_callback
    def watch(t: int, ask: bool, _user: int) -> bool:
        if ask:
            return last[0]
        tt = ctypes.cast(t, ctypes.POINTER(Tensor)).contents
        if tt.type != F32 or not tt.data or tt.ne[2] * tt.ne[3] != 1 or tt.nb[0] != 4:
            return True
        name = tt.name.decode()
        n = sum(1 for k in rows if k.rsplit("#", 1)[0] == name)
        row = np.empty(tt.ne[0], dtype=np.float32)
        offset = (tt.ne[1] - 1) * tt.nb[1]
        if tt.buffer and not GGML.ggml_backend_buffer_is_host(tt.buffer):  # on a GPU: copy it back
            GGML.ggml_backend_tensor_get(t, row.ctypes.data, offset, row.nbytes)
        else:
            ctypes.memmove(row.ctypes.data, tt.data + offset, row.nbytes)
        rows[f"{name}#{n}"] = row
        return True

    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 1024, 512, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 1 if flash_attn else 0
    cp.cb_eval = watch
    ctx = L.llama_init_from_model(model, cp)
    pos = 0
    for i, size in enumerate(splits):
        last[0] = i == len(splits) - 1
        chunk = tokens[pos:pos + size]
        batch = L.llama_batch_init(len(chunk), 0, 1)
        for j, token in enumerate(chunk):
            batch.token[j], batch.pos[j], batch.n_seq_id[j] = token, pos + j, 1
            batch.seq_id[j][0], batch.logits[j] = 0, j == len(chunk) - 1
        batch.n_tokens = len(chunk)
        assert L.llama_decode(ctx, batch) == 0
        L.llama_batch_free(batch)
        pos += size
    L.llama_free(ctx)
    return rows


def _compare(rows: dict[str, np.ndarray], saved: np.lib.npyio.NpzFile, path: pathlib.Path) -> None:
    """Print the ops whose rows differ from the saved build's (graph order, at most 12)."""
    missing = sorted(set(rows) ^ set(saved.files))
    differ = [(k, float(np.abs(v - saved[k]).max()) if v.shape == saved[k].shape else float("inf"))
              for k, v in rows.items() if k in saved.files and not np.array_equal(v, saved[k])]
    for key, diff in differ[:12]:
        print(f"against {path.name}: {key:34s} {diff:.3g}")
    print(f"against {path.name}: {len(differ)} of {len(rows)} op rows differ"
          + (f"; {len(missing)} ops in one read alone" if missing else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--repack", action="store_true", help="llama.cpp's repacked weights (extra buffer types)")
    parser.add_argument("--flash-attn", action="store_true")
    parser.add_argument("--split", default="", help="the other batches, e.g. 5,31 (default: n-1,1)")
    parser.add_argument("--all", action="store_true", help="print equal ops too")
    parser.add_argument("--gpu-layers", type=int, default=0, help="layers on the GPU (-1: all)")
    parser.add_argument("--save", type=pathlib.Path, help="keep both reads' rows in this .npz")
    parser.add_argument("--against", type=pathlib.Path, help="compare both reads' rows with a --save of another build")
    args = parser.parse_args()
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = args.repack
    mp.n_gpu_layers = args.gpu_layers
    model = L.llama_model_load_from_file(args.model.encode(), mp)
    vocab = L.llama_model_get_vocab(model)
    buf = (L.llama_token * 512)()
    n = L.llama_tokenize(vocab, TEXT, len(TEXT), buf, 512, True, True)
    tokens = list(buf[:n])
    other = [int(x) for x in args.split.split(",")] if args.split else [n - 1, 1]
    a = read(model, tokens, [n], args.flash_attn)
    b = read(model, tokens, other, args.flash_attn)
    shown = 0
    for key, row in a.items():
        if key not in b or row.shape != b[key].shape:
            continue
        diff = float(np.abs(row - b[key]).max())
        if diff > 0 or args.all:
            print(f"{key:28s} {diff:.3g}")
            shown += 1
        if shown >= 12:
            break
    if not shown:
        print(f"no op differs between [{n}] and {other}")
    both = {**{f"one:{k}": v for k, v in a.items()}, **{f"split:{k}": v for k, v in b.items()}}
    if args.save:
        np.savez(args.save, **both)
    if args.against:
        _compare(both, np.load(args.against), args.against)
    la, lb = a["result_output#0"], b["result_output#0"]
    print(f"logits [{n}] against {other}: largest difference {float(np.abs(la - lb).max()):.3g}, "
          f"argmax {int(la.argmax())} and {int(lb.argmax())}")
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
