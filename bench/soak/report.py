"""The soak's Markdown: a ``## Soak`` section that lives in docs/benchmarks/server.md beside
``python -m bench server``'s tables (each of the two commands keeps the other's part)."""

from __future__ import annotations

from pathlib import Path

HEADING = "## Soak"


def _mib(n: float | None) -> str:
    return "–" if n is None else f"{n / (1 << 20):.1f} MiB"


def markdown(report: dict) -> str:
    t, rss = report["tally"], report["rss"]
    verdict = ("**passed**" if report["passed"] else "**failed**") + (
        " (every reply identical to its first solo reply)" if report["identical"] else
        " (no error, RSS flat; not every reply identical to its first solo reply, but each "
        "that differs is another reply its request got alone or parts from it at a near-tie: "
        "see below)" if report["passed"] else "")
    lines = [f"{HEADING}\n",
             f"`{report['command']}` on {report['machine']} ({report['model']} model, "
             f"`duet-cli {' '.join(report['serve_command'][1:])}`): every request of the plan "
             f"({len(report['turns'])} turns: short chats, a whole-file edit, two multi-turn "
             f"conversations, stop strings, streamed and not, chat and text completions) sent "
             f"alone, greedy, then {report['clients']} concurrent clients for "
             f"{report['elapsed_s'] / 60:.1f} min, {report['drop_rate']:.0%} of streams dropped "
             f"mid-way on purpose, server queue bound {report['max_queue']}. {verdict}.\n"]
    if report.get("note"):
        lines.append(f"{report['note']}\n")
    growth = rss.get("growth")
    lines += ["| requests compared | 429 (retried) | other errors | mismatches with the solo reply | "
              "streams dropped | /health after a drop | RSS after warm-up | RSS at the end | change |",
              "|---|---|---|---|---|---|---|---|---|",
              f"| {t['requests']} | {t['busy']} | {t['errors']} | {t['mismatches']} | "
              f"{t['disconnects']} | {t['health_checks']} ok | {_mib(rss.get('after_warmup_bytes'))} | "
              f"{_mib(rss.get('end_bytes'))} | "
              f"{'–' if growth is None else f'{growth:+.1%}'} (limit ±{rss.get('tolerance', 0.05):.0%}) |"]
    lines.append(f"\nRSS: mean of the first three samples after {report['warmup_s']:g} s of load "
                 f"against the mean of the last three (every few seconds, {rss.get('samples', 0)} "
                 f"samples; {_mib(report.get('rss_ready_bytes'))} when the server was ready, "
                 f"peak {_mib(rss.get('max_bytes'))}).")
    if rss.get("flat") is None:
        lines.append(f"RSS not judged: {rss.get('reason')}.")
    unstable = report.get("solo_unstable") or []
    lines.append(f"Each request sent alone three times (in order, in reverse, then twice in a row): "
                 f"{'the same reply each time' if not unstable else f'{len(unstable)} got another reply'}.")
    lines += [f"- {u}" for u in unstable[:10]]
    if t["mismatches"]:
        lines.append(f"\nOf the {t['mismatches']} replies that differ from the first solo reply, "
                     f"{t['known_variants']} are a reply the same request got when sent alone "
                     f"again from another server state; {report['unexplained']} are neither that "
                     f"nor parted at a near-tie (top two logits at most {report['near_tie']:g} "
                     f"apart). Where they part, a fresh greedy run of the prompt (plain, one "
                     f"batch) has these gaps between its two best logits:\n")
        lines += ["| request | replies | a solo reply too | parts at character | step | gap (logits) | two best |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {m['turn']} | {m['count']} | {'yes' if m['known'] else 'no'} | {m['char']} | "
                  f"{m['step']} | {m['gap']} | {' / '.join(repr(b) for b in m['best'])} |"
                  for m in report.get("margins") or ()]
        lines.append(
            "\nWhy they differ: llama.cpp's CPU kernels do not give bit-identical logits for a "
            "token computed in batches of other shapes. A reply depends on how its prompt was "
            "prefilled (in one batch, or its last token alone after a cache reuse) and, with "
            "speculation, on the draft lengths the controller picks from measured verify costs, "
            "which change with the machine's load. Where a greedy reply runs through a near-tie, "
            "such a difference picks the other token, and from there the replies part. llama-server "
            "says the same of its `cache_prompt` (its README: the logits are not guaranteed to be "
            "bit-for-bit identical for different batch sizes, so the option can cause "
            "nondeterministic results).")
    notes = t.get("notes") or []
    if notes:
        lines.append("\nFirst errors:\n")
        lines += [f"- {n}" for n in notes[:20]]
    cache = (report.get("server_stats") or {}).get("cache") or {}
    if cache:
        lines.append(f"\nServer counters: {report['server_stats'].get('completed')} completed, "
                     f"{report['server_stats'].get('cancelled')} cancelled, "
                     f"{report['server_stats'].get('rejected')} rejected (429), "
                     f"{report['server_stats'].get('failed')} failed; state cache hit rate "
                     f"{cache.get('hit_rate', 0):.2f}, {cache.get('restores', 0)} restores, "
                     f"{cache.get('entries', 0)} entries ({_mib(cache.get('bytes'))}).")
    return "\n".join(lines) + "\n"


def split(text: str) -> tuple[str, str]:
    """(the text without its Soak section, the Soak section or "")."""
    start = text.find(f"\n{HEADING}\n")
    if start < 0:
        return text, ""
    end = text.find("\n## ", start + 1)
    end = len(text) if end < 0 else end
    return text[:start] + text[end:], text[start + 1:end]


def write_section(path: Path, section: str) -> None:
    """Put ``section`` into ``path`` in place of its Soak section (or at its end)."""
    rest, _ = split(path.read_text(encoding="utf-8")) if path.exists() else ("", "")
    rest = rest.rstrip("\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((rest + "\n\n" if rest else "") + section.rstrip("\n") + "\n", encoding="utf-8")


def keep_section(path: Path, text: str) -> str:
    """``text`` (a new report for ``path``) with the Soak section ``path`` already has."""
    if not path.exists():
        return text
    _, section = split(path.read_text(encoding="utf-8"))
    return text if not section else text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
