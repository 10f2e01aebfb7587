"""The llama.cpp patches as bootstrap applies them (issue 75): exactly (--fuzz=0) after a dry run;
one that does not apply is left out with one line, and the others still go in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPLY = ROOT / "scripts" / "apply_patches.sh"


def patch_of(tmp: Path, name: str, old: str, new: str) -> Path:
    """A unified diff turning ``old`` into ``new`` in vendor/file.c."""
    a, b = tmp / "a", tmp / "b"
    for d, text in ((a, old), (b, new)):
        (d / "vendor").mkdir(parents=True, exist_ok=True)
        (d / "vendor" / "file.c").write_text(text)
    diff = subprocess.run(["diff", "-u", "a/vendor/file.c", "b/vendor/file.c"], cwd=tmp,
                          capture_output=True, text=True, check=False).stdout
    shutil.rmtree(a), shutil.rmtree(b)
    out = tmp / name
    out.write_text(f"What {name} is for.\n\n{diff}")
    return out


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1), as bootstrap does")
def test_a_patch_that_does_not_apply_is_left_out_with_one_line(tmp_path):
    lines = [f"line {i}\n" for i in range(20)]
    src = tmp_path / "src"
    (src / "vendor").mkdir(parents=True)
    (src / "vendor" / "file.c").write_text("".join(lines))
    good = patch_of(tmp_path, "good.patch", "".join(lines),
                    "".join(lines[:3] + ["added\n"] + lines[3:]))
    # made for another version of the file: its context is not there
    other = [t.upper() for t in lines]
    stale = patch_of(tmp_path, "stale.patch", "".join(other),
                     "".join(other[:12] + ["never\n"] + other[12:]))
    r = subprocess.run(["bash", str(APPLY), str(src), str(stale), str(good)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["good.patch"]
    assert r.stderr.splitlines() == [
        "bootstrap: stale.patch does not apply to this llama.cpp; building without it"]
    text = (src / "vendor" / "file.c").read_text()
    assert "added\n" in text and "never" not in text
    assert not list(src.rglob("*.rej")) and not list(src.rglob("*.orig"))


def test_bootstrap_applies_the_patches_through_it():
    """The script above is what bootstrap runs, and each patch in patches/ has its switch."""
    text = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert "scripts/apply_patches.sh" in text
    for switch in ("DUET_EXACT_KERNELS", "DUET_ABORT_FLAG"):
        assert switch in text
