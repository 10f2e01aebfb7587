"""``duet-cli session inspect|verify``: look inside a ``.duet`` file; check it against models.

``inspect FILE [--json]`` prints the header, models, KV states and every section's validity
(exit 0 when everything is intact, 1 when a section is damaged or missing). ``verify FILE
--model PATH [--draft PATH] [--ctx N] [--kv-type T]`` says whether the saved KV states could be
restored with those model files (and that context), without loading any weights: exit 0 and
``OK`` when they can, else 1 and the reasons. Whether a KV state belongs to the conversation's
text needs the model itself: that is checked when the file is opened (engine.conversation.session.probe). A
damaged header or metadata raises SessionError, which engine/cli/main.py prints as ``duet-cli: error: ...`` (exit 1).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.conversation.session.fingerprint import check_model
from engine.conversation.session.format import inspect, read_meta
from engine.conversation.session.meta import ModelInfo
from engine.conversation.store import describe
from engine.errors import ModelLoadError, SessionError
from engine.runtime.runtime import resolve_model


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``session`` (with ``inspect`` and ``verify``) on the top-level subparsers."""
    parser = subparsers.add_parser("session", help="inspect or verify a saved conversation")
    sub = parser.add_subparsers(dest="session_command", required=True,
                                metavar="{inspect,verify}")
    p = sub.add_parser("inspect", help="header, models, sizes and the validity of each section")
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_inspect)
    v = sub.add_parser("verify", help="can the saved KV states be restored with these models?")
    v.add_argument("file", type=Path)
    v.add_argument("--model", required=True, help="target GGUF path or starter key")
    v.add_argument("--draft", default=None, help="draft GGUF path or starter key")
    v.add_argument("--ctx", type=int, default=None, help="context size to check against")
    v.add_argument("--kv-type", choices=("f16", "q8_0", "f32"), default=None,
                   help="KV cache type to check against")
    v.set_defaults(func=run_verify)
    return parser


# ─── inspect ──────────────────────────────────────────────────────────────────


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} KB"


def summary(path: Path) -> dict[str, Any]:
    """format.inspect plus ``bytes_per_token`` (file size / target KV tokens, or None)."""
    info = inspect(path)
    kv = info["kv"]["target"]
    info["bytes_per_token"] = round(info["file_size"] / kv["tokens"], 1) if kv and kv[
        "tokens"] else None
    info["tree"] = _tree(path)
    return info


def _tree(path: Path) -> str | None:
    """One line about the conversation tree (versions of messages) saved in the settings."""
    try:
        return describe(read_meta(path).settings.get("tree"))
    except SessionError:
        return None


def render(info: dict[str, Any]) -> str:
    """The readable form of ``summary``."""
    lines = [f"{info['path']}: Duet session, format {info['format']}, {_mb(info['file_size'])}",
             f"  created {info['created']}, saved {info['saved']}, {info['messages']} messages, "
             f"metadata {_mb(info['metadata_size'])}"]
    for role in ("target", "draft"):
        m = info["models"][role]
        if m is None:
            continue
        lines.append(f"  {role}: {m['display_name']} ({_mb(m['size'])}) {m['path']}")
        lines.append(f"    fingerprint {m['fingerprint']}")
        kv = info["kv"][role]
        lines.append("    KV: none (text only)" if kv is None else
                     f"    KV: {kv['tokens']} tokens, n_ctx {kv['n_ctx']}, "
                     f"{kv['type_k']}/{kv['type_v']}")
    if info.get("tree"):
        lines.append(f"  conversation tree: {info['tree']}")
    if info["bytes_per_token"] is not None:
        lines.append(f"  {info['bytes_per_token']:,.0f} bytes per token")
    lines.append("  sections:" if info["sections"] else "  sections: none")
    for s in info["sections"]:
        state = "ok" if s["valid"] else f"DAMAGED: {s['problem']}"
        lines.append(f"    {s['name']:<10} {s['size']:>14,} bytes  {state}")
    lines += [f"  problem: {p}" for p in info["problems"]
              if not any(p == s["problem"] for s in info["sections"])]
    return "\n".join(lines)


def run_inspect(args: argparse.Namespace) -> int:
    info = summary(args.file)
    print(json.dumps(info, indent=2) if args.json else render(info))
    return 1 if info["problems"] else 0


# ─── verify ───────────────────────────────────────────────────────────────────


def _check(role: str, info: ModelInfo | None, name: str | None, ctx: int | None,
           kv_type: str | None) -> tuple[list[str], list[str]]:
    """(reasons it fails, informational lines) for one model role."""
    if name is None:
        return [], [] if info is None else [f"{role}: not checked (no --{role} given)"]
    if info is None:
        return [f"this conversation has no {role} model"], []
    try:
        path = resolve_model(name)  # a path or a starter key; loads no weights
    except ModelLoadError as e:
        return [str(e)], []
    layout = info.layout
    if layout is not None and (ctx is not None or kv_type is not None):
        layout = replace(layout, n_ctx=ctx or layout.n_ctx, type_k=kv_type or layout.type_k,
                         type_v=kv_type or layout.type_v)
    reason = check_model(info, path, layout, role=role)
    return ([reason], []) if reason else ([], [f"{role}: {path} matches"])


def run_verify(args: argparse.Namespace) -> int:
    reasons = list(inspect(args.file)["problems"])  # every section's checksum, streamed
    meta = read_meta(args.file)
    lines: list[str] = []
    for role, info, name in (("target", meta.target, args.model),
                             ("draft", meta.draft, args.draft)):
        bad, ok = _check(role, info, name, args.ctx, args.kv_type)
        reasons += bad
        lines += ok
    if meta.kv_target is None:
        lines.append("no KV state saved (text only): the history will be processed on opening")
    else:
        lines.append("the KV state is checked against the conversation's text when opened")
    for role in ("target", "draft"):
        state = meta.kv(role)
        if state is not None and state.probe is None:
            reasons.append(f"the {role} KV state was saved by an older Duet and cannot be "
                           "checked against the conversation's text")
    if reasons:
        print(f"{args.file}: cannot restore the saved KV state:")
        print("\n".join(f"  - {r}" for r in reasons))
        return 1
    print(f"{args.file}: OK")
    print("\n".join(f"  {line}" for line in lines))
    return 0
