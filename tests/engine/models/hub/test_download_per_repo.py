"""Downloads kept per repository (publisher/repo/file): a file is present only when its SHA-256
is the Hub's, two repositories' files of one name never meet, and a file the person has is
never replaced. Real ``huggingface_hub`` against the loopback fake Hub."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fakehub import FakeFile, FakeHub, FakeRepo, sha256_of
from fakehub_repos import GATED_REPO, SMALL_FILE, SMALL_REPO

from engine.models.folder import hub_path
from engine.models.hub.download import download_entry
from engine.models.hub.errors import HubError
from engine.models.hub.search import repo_files

OTHER_REPO = "someone/small-GGUF"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(repo: str, name: str, dest: Path) -> Path:
    return download_entry(repo, repo_files(repo).entry(name), dest)


@pytest.fixture
def twin(tmp_path: Path, small_file: Path) -> Path:
    """A file of the same size as ``small_file`` with other bytes (another model's file)."""
    data = bytearray(small_file.read_bytes())
    data[-1] ^= 0xFF
    path = tmp_path / "twin.gguf"
    path.write_bytes(data)
    return path


def test_a_download_goes_to_publisher_repo_file(hub: FakeHub, dest: Path,
                                                small_file: Path) -> None:
    path = download(SMALL_REPO, SMALL_FILE, dest)
    assert path == dest / "test" / "small-GGUF" / SMALL_FILE == hub_path(dest, SMALL_REPO,
                                                                          SMALL_FILE)
    assert sha(path) == sha(small_file) and not (dest / SMALL_FILE).exists()


def test_two_repositories_files_of_one_name_never_meet(hub: FakeHub, dest: Path,
                                                       small_file: Path, twin: Path) -> None:
    hub.add(FakeRepo(OTHER_REPO, [FakeFile(SMALL_FILE, twin, sha256_of(twin))]))
    first = download(SMALL_REPO, SMALL_FILE, dest)
    second = download(OTHER_REPO, SMALL_FILE, dest)
    assert first != second
    assert sha(first) == sha(small_file) and sha(second) == sha(twin)


def test_a_gated_download_is_not_satisfied_by_another_repositorys_file(
        hub: FakeHub, dest: Path, twin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As measured: the public file of the gated file's name and size made the gated download
    'succeed' without a token."""
    hub.add(FakeRepo(OTHER_REPO, [FakeFile("gated-Q8_0.gguf", twin, sha256_of(twin))]))
    public = download(OTHER_REPO, "gated-Q8_0.gguf", dest)
    gated = repo_files(GATED_REPO).entry("gated-Q8_0.gguf")
    with pytest.raises(HubError, match="HF_TOKEN"):
        download_entry(GATED_REPO, gated, dest)
    monkeypatch.setenv("HF_TOKEN", "hf_good_token")
    path = download_entry(GATED_REPO, gated, dest)
    assert sha(path) == gated.first.sha256 and sha(public) == sha(twin)


def test_a_file_already_there_is_present_only_when_its_hash_matches(
        hub: FakeHub, dest: Path, small_file: Path, twin: Path) -> None:
    final = hub_path(dest, SMALL_REPO, SMALL_FILE)
    final.parent.mkdir(parents=True)
    final.write_bytes(small_file.read_bytes())
    hub.requests.clear()
    assert download(SMALL_REPO, SMALL_FILE, dest) == final  # the same bytes: not fetched again
    assert hub.ranges("/cdn/") == []
    final.write_bytes(twin.read_bytes())  # the same name and size, other bytes
    with pytest.raises(HubError, match="is not the Hub's file.*left as it is"):
        download(SMALL_REPO, SMALL_FILE, dest)
    assert sha(final) == sha(twin) and hub.ranges("/cdn/") == []


def test_a_file_the_person_has_is_never_replaced(hub: FakeHub, dest: Path) -> None:
    final = hub_path(dest, SMALL_REPO, SMALL_FILE)
    final.parent.mkdir(parents=True)
    final.write_bytes(b"GGUF my own notes")
    with pytest.raises(HubError, match="left as it is"):
        download(SMALL_REPO, SMALL_FILE, dest)
    assert final.read_bytes() == b"GGUF my own notes"
    assert sorted(p.name for p in final.parent.iterdir()) == [SMALL_FILE]  # no partial left


def test_names_that_would_leave_the_folder_are_refused(tmp_path: Path) -> None:
    assert hub_path(tmp_path, "a/b", "Q4/m.gguf") == tmp_path / "a" / "b" / "Q4" / "m.gguf"
    for repo, name in (("a/b", "../m.gguf"), ("../a", "m.gguf"), ("a/b/c", "m.gguf"),
                       ("a/b", "/m.gguf"), ("a/b", "x\\..\\m.gguf"), ("a/b", "q/./m.gguf")):
        with pytest.raises(ValueError):
            hub_path(tmp_path, repo, name)
