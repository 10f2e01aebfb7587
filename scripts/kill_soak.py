"""Kill soak: real processes ended by real signals during replies, and what they left on disk.

For each run, in a DUET_HOME of its own: start the window (tests/app/kill_child.py) or the
command line (``duet-cli generate --session``, continuing a conversation saved by a first,
complete turn), wait until the reply streams, wait a random (seeded) delay, send SIGKILL or
SIGTERM, then check that

- the process ended as it should (SIGKILL: killed; SIGTERM: its own exit, the window 0, the
  command line 128 + 15) and, after SIGTERM, the reply so far was saved;
- every message sent is in the saved ``.duet`` file, which opens with every checksum good
  (engine.conversation.session.format.read_session);
- ``duet-cli session verify FILE --model MODEL``, run as a process of its own, passes.

One line per run, a summary at the end; the exit status is 1 when a run failed (its DUET_HOME is
kept for a look, and named). From the repository root::

    python scripts/kill_soak.py --kills 50 --terms 20 --seed 1 --where window,cli
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.runtime.runtime import resolve_model  # noqa: E402
from tests.app.killing import (
    MESSAGE,
    ROOT,
    child_env,
    cli_args,
    end,
    saved,
    start_cli,
    start_window,
    stderr_of,
    window_file,
)

FIRST = "Say hello."  # the command line's first turn, completed before the one that is ended
EXPECTED_RC = {("window", signal.SIGKILL): -signal.SIGKILL, ("cli", signal.SIGKILL): -signal.SIGKILL,
               ("window", signal.SIGTERM): 0, ("cli", signal.SIGTERM): 128 + signal.SIGTERM}


class Failed(Exception):
    pass


def start(where: str, home: Path, model: Path) -> tuple[subprocess.Popen, Path | None, list[str]]:
    """The process with its reply streaming, the file it saves to (the window: None, it names
    its own), and the messages sent."""
    if where == "window":
        return start_window(home, model), None, [MESSAGE]
    session = home / "chat.duet"
    home.mkdir(parents=True, exist_ok=True)
    first = subprocess.run(cli_args(model, session, FIRST, "--max-tokens", "8"), cwd=ROOT,
                           env=child_env(home), capture_output=True, text=True)
    if first.returncode != 0:
        raise Failed(f"the first turn failed: {first.stderr[-2000:]}")
    return start_cli(home, model, session), session, [FIRST, MESSAGE]


def check(where: str, sig: int, rc: int, path: Path | None, sent: list[str], home: Path,
          model: Path) -> str:
    """What the run left, in a few words; raises Failed when something is wrong."""
    if rc != EXPECTED_RC[(where, sig)]:
        raise Failed(f"exit status {rc}, expected {EXPECTED_RC[(where, sig)]}: "
                     f"{stderr_of(home)[-2000:]}")
    path = path or window_file(home)
    texts = saved(path)  # every checksum
    missing = [m for m in sent if m not in texts]
    if missing:
        raise Failed(f"sent but not saved: {missing}")
    if sig == signal.SIGTERM and not texts[-1]:
        raise Failed("SIGTERM: the reply so far was not saved")
    verify = subprocess.run([sys.executable, "-m", "engine", "session", "verify", str(path),
                             "--model", str(model)], cwd=ROOT, env=child_env(home),
                            capture_output=True, text=True)
    if verify.returncode != 0:
        raise Failed(f"verify: {verify.stdout[-1000:]}{verify.stderr[-1000:]}")
    return f"rc {rc}, {len(texts)} messages, reply {len(texts[-1])} chars, verify OK"


def run_once(where: str, sig: int, delay: float, model: Path) -> tuple[bool, str]:
    home = Path(tempfile.mkdtemp(prefix=f"kill-soak-{where}-"))
    try:
        proc, path, sent = start(where, home, model)
        time.sleep(delay)  # the one deliberate wait: where in the reply the signal lands
        if proc.poll() is not None:
            raise Failed(f"the process ended before the signal (status {proc.returncode})")
        rc = end(proc, sig)
        result = True, check(where, sig, rc, path, sent, home, model)
    except Exception as e:  # noqa: BLE001 - every failure is reported, and the soak goes on
        return False, f"FAILED: {type(e).__name__}: {e} (DUET_HOME kept: {home})"
    shutil.rmtree(home, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs per place (default 50)")
    parser.add_argument("--terms", type=int, default=20, help="SIGTERMs per place (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--where", default="window,cli", help="window, cli or both (default)")
    parser.add_argument("--max-delay", type=float, default=3.0,
                        help="the signal lands 0 to this many seconds into the reply (default 3)")
    parser.add_argument("--model", type=Path, default=None,
                        help="GGUF (default: the starter test model, SmolLM2-135M)")
    args = parser.parse_args(argv)
    model = args.model or resolve_model("test")
    places = [w.strip() for w in args.where.split(",") if w.strip()]
    if not places or set(places) - {"window", "cli"}:
        parser.error("--where takes window, cli or both")
    rng = random.Random(args.seed)
    times: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    for where in places:
        sigs = [signal.SIGKILL] * args.kills + [signal.SIGTERM] * args.terms
        rng.shuffle(sigs)
        times[where], failures[where] = [], 0
        for i, sig in enumerate(sigs, 1):
            delay = rng.uniform(0, args.max_delay)
            t0 = time.monotonic()
            ok, what = run_once(where, sig, delay, model)
            times[where].append(time.monotonic() - t0)
            failures[where] += not ok
            print(f"{where:6} {i:3}/{len(sigs)} {signal.Signals(sig).name} after {delay:4.2f} s: "
                  f"{what} ({times[where][-1]:.1f} s)", flush=True)
    print("summary:")
    for where in places:
        median = statistics.median(times[where]) if times[where] else 0.0
        print(f"  {where:6} runs {len(times[where])}, failures {failures[where]}, "
              f"median {median:.1f} s per run, total {sum(times[where]):.0f} s")
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
