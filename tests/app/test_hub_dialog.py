"""The Browse Hugging Face dialog against a loopback fake Hub: search → pick → fit → download → ready."""

from __future__ import annotations

import hashlib

import pytest
from huggingface_hub import constants

from engine.models.catalog import CATALOG
from tests.conftest import REPLY_WAIT_S, model_path
from tests.engine.models.hub.fakehub import FakeFile, FakeHub, FakeRepo, sha256_of

LONG_MS = REPLY_WAIT_S * 1000  # a safety net: as long as a test may run (tests/conftest.py)

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    small = tmp_path / "small.gguf"
    with open(model_path("test"), "rb") as src:
        small.write_bytes(src.read(2 << 20))
    h = FakeHub()
    h.add(FakeRepo(REPO, [FakeFile("SmolLM2-135M-Instruct-Q4_1.gguf", model_path("test"), CATALOG["test"].sha256),
                          FakeFile("SmolLM2-135M-Instruct-Q2_K.gguf", small, sha256_of(small))], downloads=5))
    h.start()
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", h.url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield h
    h.stop()


@pytest.fixture
def dialog(qtbot, tmp_path):
    from app.views.hub_dialog import HubDialog

    d = HubDialog(dest=tmp_path / "models")
    qtbot.addWidget(d)
    yield d
    d.done(0)


def finish(qtbot, d):
    """Wait for the dialog's current task to end."""
    qtbot.waitUntil(lambda: not d.busy(), timeout=LONG_MS)


def test_search_pick_fit_download_ready(qtbot, hub, dialog, tmp_path):
    d = dialog
    d.query.setText("smol")
    d.start_search()
    qtbot.waitUntil(lambda: d.repos.count() == 1, timeout=LONG_MS)
    finish(qtbot, d)
    assert d.repos.item(0).text() == REPO
    d.repos.setCurrentRow(0)  # lists the files
    qtbot.waitUntil(lambda: d.files.rowCount() == 2, timeout=LONG_MS)
    finish(qtbot, d)
    assert "licence apache-2.0" in d.status.text()
    quants = [d.files.item(r, 0).text() for r in range(2)]
    d.files.selectRow(quants.index("Q4_1"))  # reads the header and shows the fit
    qtbot.waitUntil(lambda: d.fit_label.text().startswith(("fits", "tight", "won't fit")), timeout=LONG_MS)
    assert "KV cache" in d.fit_label.text()
    assert "GPU memory" not in d.fit_label.text()  # this build has no GPU: nothing offloaded
    finish(qtbot, d)
    d.gpu_layers.setValue(-1)  # every layer on a GPU, which this machine does not report
    d.start_fit()
    qtbot.waitUntil(lambda: "GPU memory" in d.fit_label.text(), timeout=LONG_MS)
    assert "not known here" in d.fit_label.text()
    finish(qtbot, d)
    d.files.selectRow(quants.index("Q2_K"))
    finish(qtbot, d)
    with qtbot.waitSignal(d.model_ready, timeout=LONG_MS) as ready:
        d.start_download()
    path = ready.args[0]
    assert path == tmp_path / "models" / REPO / "SmolLM2-135M-Instruct-Q2_K.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hub.repos[REPO].files[1].sha256
    assert d.status.text() == f"Ready to load: {path.name}" and d.progress.value() == 1000


def test_the_models_bar_lists_downloads_by_repository(qtbot, monkeypatch, tmp_path):
    """A download named like a starter model is listed by its place, not as the starter."""
    from app.views.models_panel import ModelsPanel

    models = tmp_path / "models"
    starter = models / CATALOG["test"].filename
    download = models / "bartowski" / "SmolLM2-GGUF" / CATALOG["test"].filename
    for path in (starter, download, models / "bartowski" / "SmolLM2-GGUF" / "x.gguf.part"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"GGUF" + bytes(100))
    monkeypatch.setenv("DUET_MODELS_DIR", str(models))
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    combo = panel.draft_combo
    listed = {combo.itemText(i): combo.itemData(i) for i in range(combo.count())}
    assert listed == {"None": None, CATALOG["test"].display_name: str(starter),
                      f"bartowski/SmolLM2-GGUF/{CATALOG['test'].filename}": str(download),
                      "Browse…": "__browse__"}


def test_an_unreachable_hub_is_reported_not_hung(qtbot, hub, dialog):
    hub.stop()
    dialog.query.setText("smol")
    dialog.start_search()
    finish(qtbot, dialog)
    assert "cannot reach Hugging Face" in dialog.status.text()
    assert dialog.search_button.isEnabled()


def test_the_models_panel_opens_the_dialog_and_takes_the_download(qtbot, monkeypatch, tmp_path):
    from app.views import hub_dialog
    from app.views.models_panel import ModelsPanel

    got = tmp_path / "downloaded.gguf"
    got.write_bytes(b"GGUF")

    def fake_exec(self):
        self.model_ready.emit(got)
        return 0

    monkeypatch.setattr(hub_dialog.HubDialog, "exec", fake_exec)
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    panel.hub_button.click()
    assert panel.target() == got
