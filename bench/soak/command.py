"""``python -m bench soak``: the command (see the package's docstring)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import client
from bench.client import Busy, Failed
from bench.process import REPO, Process, free_port, rss_bytes, start_server
from bench.soak import plan
from bench.soak.margin import margins, unexplained
from bench.soak.report import markdown, write_section
from engine.errors import DuetError

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="the server under concurrent streaming clients for minutes")
    p.add_argument("--model", default="test", help="GGUF path or starter key")
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--warmup-s", type=float, default=60.0, help="load before RSS counts as warm")
    p.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    p.add_argument("--drop-rate", type=float, default=0.1,
                   help="share of streamed requests dropped mid-stream on purpose")
    p.add_argument("--max-queue", type=int, default=4,
                   help="the server's queue bound (below --clients, so that 429 happens)")
    p.add_argument("--near-tie", type=float, default=0.5,
                   help="a reply that parts from its solo reply where the top two logits are at "
                        "most this far apart is a near-tie, not a failure (default 0.5)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for duet-cli serve (repeatable, e.g. --serve-arg=--draft=draft)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "server.md")
    p.add_argument("--json", type=Path, default=REPO / "docs" / "benchmarks" / "server-soak.json")
    p.add_argument("--server-log", type=Path,
                   default=Path(tempfile.gettempdir()) / "duet-soak-server.log")
    p.add_argument("--note", default="", help="a line about the run for the report")
    p.set_defaults(func=run)


def serve(args: argparse.Namespace, port: int) -> Process:
    """``duet-cli serve`` in a child process (so that its RSS is the server's alone), its log in
    ``--server-log``, once it answers /health."""
    cmd = [sys.executable, "-m", "engine", "-v", "serve", "--model", args.model,
           "--port", str(port), "--ctx", str(args.ctx), "--threads", str(args.threads),
           "--max-queue", str(args.max_queue), *args.serve_arg]
    return start_server(cmd, port, "duet-cli serve", log_path=args.server_log)


# -- phases ---------------------------------------------------------------------------------
def solo(port: int) -> tuple[dict[str, client.HttpReply], list[str], dict[str, set[str]]]:
    """Each turn alone, in order, then again in reverse, then each twice in a row (the second
    reusing the whole prompt but its last token). The first replies; the turns whose later solo
    replies differ (the server's state before a request changed its reply); every solo text."""
    replies: dict[str, client.HttpReply] = {}
    texts: dict[str, str] = {}
    for turn in plan.turns():
        reply = _once(port, turn, texts)
        replies[turn.id], texts[turn.id] = reply, reply.text
    seen = {k: {r.text} for k, r in replies.items()}
    unstable = []
    order = list(reversed(plan.turns())) + [t for t in plan.turns() for _ in range(2)]
    for turn in order:
        again = _once(port, turn, texts)
        why = plan.mismatch(replies[turn.id], again)
        if why and again.text not in seen[turn.id]:
            unstable.append(f"{turn.id}: {why}".replace("under load", "sent again"))
        seen[turn.id].add(again.text)
    return replies, unstable, seen


def _once(port: int, turn: plan.SoakTurn, texts: dict[str, str]) -> client.HttpReply:
    while True:
        try:
            return client.post(port, turn.path, plan.body(turn, texts))
        except Busy as b:
            time.sleep(b.retry_after)
            continue
        except Failed as e:
            raise DuetError(f"the solo request {turn.id} failed: {e}") from None


class Client(threading.Thread):
    """Sends scripts until ``deadline``; its own Tally."""

    def __init__(self, index: int, port: int, solo_replies: dict[str, client.HttpReply],
                 seen: dict[str, set[str]], deadline: float, drop_rate: float) -> None:
        super().__init__(name=f"soak-client-{index}", daemon=True)
        self.port, self.solo, self.deadline, self.drop_rate = port, solo_replies, deadline, drop_rate
        self.texts = {k: r.text for k, r in solo_replies.items()}
        self.seen = seen
        self.rng = random.Random(index)
        self.tally = plan.Tally()

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            script = self.rng.choice(plan.SCRIPTS)
            for turn in script.turns:
                if not self._turn(turn) or time.monotonic() >= self.deadline:
                    break

    def _turn(self, turn: plan.SoakTurn) -> bool:
        """One request (retried after 429); False when the script should not go on."""
        drop = turn.stream and self.rng.random() < self.drop_rate
        abort_after = self.rng.randint(1, 4) if drop else None
        t = self.tally
        while True:
            try:
                reply = client.post_dropping(self.port, turn.path, plan.body(turn, self.texts),
                                             abort_after)
                break
            except Busy as b:
                t.busy += 1
                time.sleep(b.retry_after)
            except Failed as e:
                t.errors += 1
                t.note(f"{turn.id}: {e}")
                return False
        if reply is None:
            t.disconnects += 1
            try:
                client.health(self.port)
                t.health_checks += 1
            except Failed as e:
                t.errors += 1
                t.note(f"after dropping {turn.id}: {e}")
            return False
        t.requests += 1
        t.by_turn[turn.id] = t.by_turn.get(turn.id, 0) + 1
        why = plan.mismatch(self.solo[turn.id], reply)
        if why:
            t.mismatch(turn.id, reply.text, reply.text in self.seen[turn.id])
            log.info("%s: %s", turn.id, why)
        return True


def sample_rss(pid: int, stop_event: threading.Event, period: float, t0: float,
               out: list[tuple[float, int]]) -> None:
    while True:
        rss = rss_bytes(pid)
        if rss is not None:
            out.append((round(time.monotonic() - t0, 1), rss))
        if stop_event.wait(period):
            return


def load(port: int, pid: int, solo_replies: dict[str, client.HttpReply], seen: dict[str, set[str]],
         args: argparse.Namespace) -> tuple[plan.Tally, list[tuple[float, int]], float]:
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60
    samples: list[tuple[float, int]] = []
    done = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(pid, done, args.sample_s, t0, samples),
                               name="soak-rss", daemon=True)
    sampler.start()
    clients = [Client(i, port, solo_replies, seen, deadline, args.drop_rate) for i in range(args.clients)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.monotonic() - t0
    done.set()
    sampler.join()
    total = plan.Tally()
    for c in clients:
        total.add(c.tally)
    return total, samples, elapsed


def run(args: argparse.Namespace) -> int:
    if args.clients < 1 or args.minutes <= 0 or args.sample_s <= 0 or not 0 <= args.drop_rate <= 1:
        raise DuetError("--clients >= 1, --minutes > 0, --sample-s > 0, 0 <= --drop-rate <= 1")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with serve(args, port) as server:
        rss_ready = rss_bytes(server.pid)
        print(f"soak: server up on port {port} (log: {args.server_log}); sending each "
              f"request alone", flush=True)
        solo_replies, unstable, seen = solo(port)
        print(f"soak: {args.clients} clients for {args.minutes:g} min", flush=True)
        tally, samples, elapsed = load(port, server.pid, solo_replies, seen, args)
        try:
            client.health(port)
        except Failed as e:  # the server died or hangs: that is an error of the soak's own
            tally.errors += 1
            tally.note(f"at the end: {e} (server exit code {server.proc.poll()})")
        try:
            stats = client.get_json(port, "/v1/duet/stats")
        except Failed as e:
            stats = {"error": str(e)}
    near = margins(args.model, args.ctx, solo_replies, tally.mismatched, seen)
    report = {
        "command": _command_line(sys.argv[1:]), "serve_command": server.command[2:],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "note": args.note,
        "model": args.model, "clients": args.clients, "minutes": args.minutes,
        "elapsed_s": round(elapsed, 1), "max_queue": args.max_queue, "warmup_s": args.warmup_s,
        "drop_rate": args.drop_rate, "turns": [t.id for t in plan.turns()],
        "solo": {k: {"text": r.text, "finish_reason": r.finish_reason}
                 for k, r in solo_replies.items()}, "solo_unstable": unstable,
        "tally": tally.__dict__, "rss_ready_bytes": rss_ready, "rss_samples": samples,
        "rss": plan.rss_verdict(samples, args.warmup_s), "server_stats": stats, "margins": near}
    report["identical"] = tally.mismatches == 0
    report["near_tie"] = args.near_tie
    report["unexplained"] = unexplained(tally.mismatches, near, args.near_tie)
    report["passed"] = (tally.errors == 0 and report["unexplained"] == 0 and tally.requests > 0
                        and report["rss"]["flat"] is True)
    args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    text = markdown(report)
    write_section(args.out, text)
    print(text)
    return 0 if report["passed"] else 1


def _command_line(argv: list[str]) -> str:
    """The command as typed, less its --note (which the report prints on its own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
        elif not a.startswith("--note="):
            out.append(a)
    return "python -m bench " + shlex.join(out)

