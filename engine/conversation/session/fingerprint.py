"""Model identity for saved sessions: the KV cache layout of a live context, and whether a saved KV
state fits the model (its file's fingerprint, engine.models.identity) and cache there are now.

A saved KV state is only meaningful for the exact weights and cache layout that produced it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from engine.conversation.session.meta import KVLayout, ModelInfo
from engine.errors import ModelLoadError
from engine.models.identity import file_fingerprint, fingerprint_size


class _ModelShape(Protocol):
    n_layer: int
    n_head_kv: int

    @property
    def head_dim_k(self) -> int: ...

    @property
    def head_dim_v(self) -> int: ...


def kv_layout(model: _ModelShape, n_ctx: int, type_k: str, type_v: str) -> KVLayout:
    """KVLayout of a context of ``n_ctx`` tokens over ``model`` (anything with n_layer,
    n_head_kv, head_dim_k, head_dim_v — engine.llama.model.Model fits)."""
    return KVLayout(n_ctx=int(n_ctx), type_k=type_k, type_v=type_v, n_layer=int(model.n_layer),
                    n_embd_k_gqa=int(model.n_head_kv * model.head_dim_k),
                    n_embd_v_gqa=int(model.n_head_kv * model.head_dim_v))


def check_model(info: ModelInfo, path_now: Path | str, layout_now: KVLayout | None, *,
                role: str = "target", fingerprint_now: str | None = None) -> str | None:
    """None when the model at ``path_now`` (with cache ``layout_now``) can take the KV state saved
    with ``info``; otherwise a one-line reason. The size is compared before any hashing, and
    ``fingerprint_now`` (if the caller already has it) saves the hashing altogether. A None
    layout on either side skips the layout comparison (text-only sessions)."""
    path_now = Path(path_now)
    try:
        size_now = path_now.stat().st_size
    except FileNotFoundError:
        return f"model file not found: {path_now}"
    except OSError as e:
        return f"cannot read the {role} model file {path_now}: {e.strerror or e}"
    changed = _changed(info, path_now, role)
    saved_size = fingerprint_size(info.fingerprint)
    if saved_size is None:
        return f"the {role} model was saved with an unknown fingerprint kind"
    if size_now != info.size or size_now != saved_size:
        return changed
    if fingerprint_now is None:
        try:
            fingerprint_now = file_fingerprint(path_now)
        except ModelLoadError as e:
            return str(e)
    if fingerprint_now != info.fingerprint:
        return changed
    if info.layout is None or layout_now is None:
        return None
    return _layout_reason(info.layout, layout_now, role)


def _changed(info: ModelInfo, path_now: Path, role: str) -> str:
    """The reason for a fingerprint mismatch: the same file changed, or another model."""
    try:
        same_file = Path(info.path).resolve() == path_now.resolve()
    except (OSError, RuntimeError):
        same_file = False
    if same_file:
        return f"the {role} model file changed since this conversation was saved"
    return (f"{path_now.name} is a different {role} model from the one this conversation was "
            f"saved with ({info.display_name or Path(info.path).name})")


def _layout_reason(saved: KVLayout, now: KVLayout, role: str) -> str | None:
    """One line naming the first difference between two layouts, or None."""
    if (saved.n_layer, saved.n_embd_k_gqa, saved.n_embd_v_gqa) != (
            now.n_layer, now.n_embd_k_gqa, now.n_embd_v_gqa):
        return (f"the {role} model's KV cache shape differs from the saved one "
                f"({saved.n_layer}×{saved.n_embd_k_gqa}/{saved.n_embd_v_gqa} vs "
                f"{now.n_layer}×{now.n_embd_k_gqa}/{now.n_embd_v_gqa})")
    if saved.type_k != now.type_k or saved.type_v != now.type_v:
        return (f"the {role} model's KV cache was saved as {saved.type_k}/{saved.type_v}; "
                f"now {now.type_k}/{now.type_v}")
    if saved.n_ctx != now.n_ctx:
        return (f"the {role} model's KV cache was saved with context size {saved.n_ctx}; "
                f"now {now.n_ctx}")
    return None

