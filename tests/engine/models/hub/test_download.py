"""Downloads from the fake Hub: resume, verification, errors, split files, disk space, cancel."""

from __future__ import annotations

import hashlib
import threading
from collections import namedtuple
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from fakehub import listing
from fakehub_repos import GATED_REPO, SMALL_FILE, SMALL_REPO, SMOL_FILE, SMOL_REPO

from engine.models.folder import hub_path
from engine.models.hub import download as dl
from engine.models.hub.download import DownloadOptions, download_entry, part_path
from engine.models.hub.errors import DownloadCancelled, HubError
from engine.models.hub.search import repo_files
from tests.conftest import REPLY_WAIT_S

NO_RETRY = DownloadOptions(retries=0)


def entry(repo: str, name: str):
    return repo_files(repo).entry(name)


def small(dest):
    """Where the small repository's file goes."""
    return hub_path(dest, SMALL_REPO, SMALL_FILE)


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_real_model_downloads_verified_and_loads(hub, dest):
    from engine.llama.model import Model, ModelSpec

    events = []
    path = download_entry(SMOL_REPO, entry(SMOL_REPO, SMOL_FILE), dest, progress=events.append)
    assert path == hub_path(dest, SMOL_REPO, SMOL_FILE) and listing(path.parent) == [SMOL_FILE]
    assert events[-1].stage == "done" and events[-1].done_bytes == events[-1].total_bytes == 98362432
    assert "verify" in {e.stage for e in events}
    with Model(ModelSpec(path, vocab_only=True)) as m:
        assert m.n_vocab == 49152


def test_an_interrupted_download_resumes_from_the_partial_size(hub, dest, small_file):
    e = entry(SMALL_REPO, SMALL_FILE)
    hub.cut_after = [1_000_000]
    with pytest.raises(HubError, match="dropped after 1.0 MB"):
        download_entry(SMALL_REPO, e, dest, options=NO_RETRY)
    part = part_path(small(dest))
    assert part.stat().st_size == 1_000_000 and not small(dest).exists()
    hub.requests.clear()
    path = download_entry(SMALL_REPO, e, dest, options=NO_RETRY)  # a fresh call, as after a restart
    assert hub.ranges("/cdn/") == ["bytes=1000000-"]
    assert sha(path) == sha(small_file) and listing(small(dest).parent) == [SMALL_FILE]


def test_a_dropped_connection_is_resumed_automatically(hub, dest, small_file):
    hub.cut_after = [500_000, 700_000]
    path = download_entry(SMALL_REPO, entry(SMALL_REPO, SMALL_FILE), dest,
                          options=DownloadOptions(retries=2, retry_wait_s=0))
    assert hub.ranges("/cdn/") == [None, "bytes=500000-", "bytes=1200000-"]
    assert sha(path) == sha(small_file)


def test_a_part_of_another_version_is_not_resumed(hub, dest, small_file):
    e = entry(SMALL_REPO, SMALL_FILE)
    part = part_path(small(dest))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 1000)
    small(dest).with_name(SMALL_FILE + ".part.json").write_text('{"etag": "old", "size": 1, "sha256": "old"}')
    path = download_entry(SMALL_REPO, e, dest, options=NO_RETRY)
    assert hub.ranges("/cdn/") == [None] and sha(path) == sha(small_file)


def test_checksum_mismatch_leaves_no_file_under_the_final_name(hub, dest):
    hub.wrong_sha.add(SMALL_FILE)
    with pytest.raises(HubError, match="SHA-256 mismatch"):
        download_entry(SMALL_REPO, entry(SMALL_REPO, SMALL_FILE), dest, options=NO_RETRY)
    assert listing(small(dest).parent) == []


def test_gated_repo_messages(hub, dest, monkeypatch):
    e = entry(GATED_REPO, "gated-Q8_0.gguf")
    with pytest.raises(HubError, match="accept its licence.*set HF_TOKEN"):
        download_entry(GATED_REPO, e, dest)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(HubError, match=r"access refused \(HTTP 403\)"):
        download_entry(GATED_REPO, e, dest)
    monkeypatch.setenv("HF_TOKEN", "hf_good_token")
    assert download_entry(GATED_REPO, e, dest).name == "gated-Q8_0.gguf"


def test_missing_file_is_404(hub, dest):
    e = entry(SMALL_REPO, SMALL_FILE)
    hub.repos[SMALL_REPO].files.clear()  # gone between the listing and the download
    with pytest.raises(HubError, match="not found on the Hub"):
        download_entry(SMALL_REPO, e, dest)


def test_the_server_dying_mid_download_keeps_the_part(hub, dest):
    hub.cut_after = [2_000_000]
    hub.die_on_cut = True  # every request after the cut is refused: the automatic resume fails
    with pytest.raises(HubError, match="cannot reach Hugging Face"):
        download_entry(SMALL_REPO, entry(SMALL_REPO, SMALL_FILE), dest,
                       options=DownloadOptions(retries=1, retry_wait_s=0))
    assert hub.ranges("/cdn/") == [None, "bytes=2000000-"]  # the resume was tried, and refused
    assert part_path(small(dest)).stat().st_size == 2_000_000
    assert not small(dest).exists()


def test_no_disk_space_is_refused_before_downloading(hub, dest, monkeypatch):
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(dl.shutil, "disk_usage", lambda _p: Usage(10**9, 10**9 - 10**6, 10**6))
    e = entry(SMALL_REPO, SMALL_FILE)
    hub.requests.clear()
    with pytest.raises(HubError, match="not enough disk space.*3.1 MB needed, 1.0 MB free"):
        download_entry(SMALL_REPO, e, dest)
    assert hub.ranges("/cdn/") == [] and listing(dest) == []


def test_split_model_downloads_every_part(split_repo, dest):
    e = repo_files("test/split-GGUF").entries[0]
    events = []
    first = download_entry("test/split-GGUF", e, dest, progress=events.append)
    assert first == dest / "test" / "split-GGUF" / "Q4_1" / "split-Q4_1-00001-of-00003.gguf"
    assert listing(first.parent) == [f"split-Q4_1-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert b"".join(hub_path(dest, "test/split-GGUF", f.path).read_bytes() for f in e.files) == b"".join(
        f.source.read_bytes() for f in split_repo.files[:3])
    assert {ev.n_parts for ev in events} == {3} and events[-1].done_bytes == e.size


def test_cancel_keeps_the_partial_download(hub, dest, small_file):
    cancel = threading.Event()

    def progress(p):
        if p.stage == "download":
            cancel.set()  # as the GUI's Cancel button does, from another thread

    with pytest.raises(DownloadCancelled, match="kept to resume"):
        download_entry(SMALL_REPO, entry(SMALL_REPO, SMALL_FILE), dest, progress=progress, cancel=cancel)
    assert 0 < part_path(small(dest)).stat().st_size < small_file.stat().st_size
    assert not small(dest).exists()


def test_each_piece_received_is_on_disk_before_the_next_is_read(hub, dest, small_file, monkeypatch):
    """What a killed download leaves is what it had received: each piece, however small, is
    written through before the next one is read (none waits in a buffer of the process)."""
    data = small_file.read_bytes()
    part = part_path(small(dest))
    pieces = [data[:100_000], data[100_000:100_010], data[100_010:2_000_000], data[2_000_000:]]
    on_disk: list[tuple[int, int]] = []

    class Response:
        status_code = 200

        def iter_bytes(self):
            got = 0
            for piece in pieces:
                on_disk.append((part.stat().st_size, got))  # as the next piece is read
                yield piece
                got += len(piece)
            on_disk.append((part.stat().st_size, got))

    @contextmanager
    def stream(*args, **kwargs):
        yield Response()

    monkeypatch.setattr(dl.client, "session", lambda: SimpleNamespace(stream=stream))
    path = download_entry(SMALL_REPO, entry(SMALL_REPO, SMALL_FILE), dest, options=NO_RETRY)
    assert sha(path) == sha(small_file)
    assert on_disk == [(got, got) for _, got in on_disk] and len(on_disk) == len(pieces) + 1


def test_a_killed_download_process_resumes_where_it_stopped(hub, dest, small_file):
    """The issue's target: kill the downloading process mid-file, start again, get the right file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    hub.pause_after = 1_500_000
    env = {**os.environ, "DUET_MODELS_DIR": str(dest)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli.models", "download", SMALL_REPO, SMALL_FILE],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert hub.paused.wait(REPLY_WAIT_S), "the download never started"
        part = part_path(small(dest))
        deadline = time.monotonic() + REPLY_WAIT_S  # only a hang guard
        while (not part.exists() or part.stat().st_size < 1_500_000) and time.monotonic() < deadline:
            time.sleep(0.02)  # a condition poll: the client writes what it received
        assert part.stat().st_size == 1_500_000
        proc.send_signal(signal.SIGKILL)
        proc.wait(REPLY_WAIT_S)
    finally:
        hub.resume.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not small(dest).exists()
    hub.requests.clear()
    path = download_entry(SMALL_REPO, entry(SMALL_REPO, SMALL_FILE), dest, options=NO_RETRY)
    assert hub.ranges("/cdn/") == ["bytes=1500000-"]
    assert sha(path) == sha(small_file) and listing(small(dest).parent) == [SMALL_FILE]
