"""Markdown table and PNG chart of a speculative benchmark report."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from bench.llama_server import NGRAM_MODES

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
            where = "an earlier turn's reply, at conversation token" if r.get("earlier_turn") else "token"
            same = f"no: from {where} {r['first_diff']} (top-2 margin {r['margin']:.3f})"
        lines.append(f"| {r['prompt']} | {r['mode']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f} | "
                     f"{_fmt(r.get('acceptance'))} | {_fmt(r.get('tokens_per_pass'))} | {same} |")
    return "\n".join(lines)


def chart(report: dict, path: Path, title: str = "Duet speculative decoding (greedy, same run)",
          xlabel: str = "") -> None:
    """Grouped bars of speedup against plain decoding, one group per prompt."""
    try:
        import matplotlib  # lazy and optional (the bench extra): the tables come without it

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
    ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.legend(fontsize=8, ncol=min(len(modes), 4), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- the suite: per category and overall ------------------------------------------------------

def geomean(values: list[float]) -> float:
    """Geometric mean of the positive values (0.0 when there are none)."""
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else 0.0


def summarize(rows: list[dict]) -> dict:
    """Per category and mode: geometric mean and minimum of the speedups, mean acceptance and
    tokens per pass, prompts identical to plain. Overall: the geometric mean of the categories'
    geometric means, so that each category weighs the same whatever its number of prompts."""
    cats: dict[str, dict[str, dict]] = {}
    for cat in dict.fromkeys(r["category"] for r in rows):
        cats[cat] = {}
        for mode in dict.fromkeys(r["mode"] for r in rows if r["category"] == cat):
            sel = [r for r in rows if r["category"] == cat and r["mode"] == mode]
            acc = [r["acceptance"] for r in sel if r.get("acceptance") is not None]
            tpp = [r["tokens_per_pass"] for r in sel if r.get("tokens_per_pass")]
            cats[cat][mode] = {
                "speedup": geomean([r["speedup"] for r in sel]),
                "min_speedup": min(r["speedup"] for r in sel),
                "acceptance": sum(acc) / len(acc) if acc else None,
                "tokens_per_pass": sum(tpp) / len(tpp) if tpp else None,
                "identical": sum(1 for r in sel if r.get("identical")),
                "n": len(sel)}
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    overall = {m: geomean([c[m]["speedup"] for c in cats.values() if m in c]) for m in modes}
    out = {"categories": cats, "overall": overall}
    if any(r["mode"] in NGRAM_MODES for r in rows):
        out["auto_vs_server"] = versus_server(rows)
    return out


def versus_server(rows: list[dict], mode: str = "auto") -> dict:
    """Per category: the geometric mean and minimum over prompts of Duet ``mode``'s tok/s over
    llama-server's best n-gram mode on that prompt (tok/s as each measures its own generation)."""
    ratios: dict[str, list[float]] = {}
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        sel = {r["mode"]: r for r in rows if r["prompt"] == prompt}
        best = max((sel[m]["tokens_per_s"] for m in NGRAM_MODES if m in sel), default=0.0)
        if mode in sel and best > 0:
            ratios.setdefault(sel[mode]["category"], []).append(sel[mode]["tokens_per_s"] / best)
    cats = {c: {"ratio": geomean(v), "min": min(v), "n": len(v)} for c, v in ratios.items()}
    return {"mode": mode, "categories": cats,
            "overall": geomean([c["ratio"] for c in cats.values()])}


def suite_markdown(report: dict) -> str:
    """The per-category table (geometric means of × plain, worst prompt in brackets), then every
    prompt."""
    summary = report["summary"]
    modes = list(summary["overall"])
    lines = [
        f"Suite {report['suite_hash']} (seed {report['suite_seed']}, Python {report['python']}, "
        f"{report['n_prompts']} prompts)",
        "",
        "Geometric mean of × plain per category (lowest prompt in brackets); overall: the geometric "
        "mean of the categories.",
        "",
        "| category | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for cat, per_mode in summary["categories"].items():
        cells = [f"{per_mode[m]['speedup']:.2f} ({per_mode[m]['min_speedup']:.2f})"
                 if m in per_mode else "–" for m in modes]
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    lines.append("| **overall** | " + " | ".join(f"**{summary['overall'][m]:.2f}**" for m in modes) + " |")
    lines += ["", "Acceptance / tokens per target pass (means over the category's prompts):", "",
              "| category | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for cat, per_mode in summary["categories"].items():
        cells = [f"{_fmt(per_mode[m]['acceptance'])} / {_fmt(per_mode[m]['tokens_per_pass'], '.1f')}"
                 if m in per_mode else "–" for m in modes]
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    vs = summary.get("auto_vs_server")
    if vs:
        lines += ["", f"Duet {vs['mode']} × llama-server's best n-gram mode on each prompt (geometric "
                  "mean per category, lowest prompt in brackets):", "",
                  "| category | ratio |", "|---|---|"]
        lines += [f"| {cat} | {v['ratio']:.2f} ({v['min']:.2f}) |" for cat, v in vs["categories"].items()]
        lines.append(f"| **overall** | **{vs['overall']:.2f}** |")
    lines += ["", markdown_table(report)]
    return "\n".join(lines)


def suite_chart(report: dict, path: Path) -> None:
    """Grouped bars of the per-category geometric means, and overall."""
    summary = report["summary"]
    rows = [{"prompt": cat, "mode": m, "speedup": v["speedup"]}
            for cat, per_mode in summary["categories"].items() for m, v in per_mode.items()]
    rows += [{"prompt": "overall", "mode": m, "speedup": v} for m, v in summary["overall"].items()]
    chart({"rows": rows}, path, title="Duet speculative decoding on the suite (geometric means, greedy)")
