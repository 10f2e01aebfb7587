"""Markdown table and PNG chart of a speculative benchmark report."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def _fmt(v: object, spec: str = ".2f") -> str:
    return "–" if v is None else format(v, spec)


def markdown_table(report: dict) -> str:
    lines = [
        f"Greedy, {Path(report['model']).name} (draft {Path(report['draft']).name}), "
        f"{report['threads']} threads, max {report['max_tokens']} tokens, median of {report['repeats']}",
        "",
        "| prompt | mode | tok/s | × plain | acceptance | tok/pass | identical to plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        same = {True: "yes", False: "no", None: "–"}[r.get("identical")]
        if r.get("identical") is False and "first_diff" in r:
            same = f"no: from token {r['first_diff']} (top-2 margin {r['margin']:.3f})"
        lines.append(f"| {r['prompt']} | {r['mode']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f} | "
                     f"{_fmt(r.get('acceptance'))} | {_fmt(r.get('tokens_per_pass'))} | {same} |")
    return "\n".join(lines)


def chart(report: dict, path: Path) -> None:
    """Grouped bars of speedup against plain decoding, one group per prompt."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no chart (pip install duet[bench])")
        return
    prompts = list(dict.fromkeys(r["prompt"] for r in report["rows"]))
    modes = list(dict.fromkeys(r["mode"] for r in report["rows"]))
    width = 0.8 / len(modes)
    fig, ax = plt.subplots(figsize=(max(7, 1.8 * len(prompts)), 5), dpi=110)
    for j, mode in enumerate(modes):
        vals = [next((r["speedup"] for r in report["rows"] if r["prompt"] == p and r["mode"] == mode), 0)
                for p in prompts]
        ax.bar([i + j * width for i in range(len(prompts))], vals, width, label=mode)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(prompts))], prompts)
    ax.set_ylabel("speed / plain decoding")
    ax.set_title("Duet speculative decoding (greedy, same run)")
    ax.legend(fontsize=8, ncol=min(len(modes), 4), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
