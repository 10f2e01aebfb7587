"""The chat pickers (Target, Draft) offer chat models only: an embedding model in the models
folder is not listed, and one browsed to or dropped is refused in one line. Real models."""

from __future__ import annotations

from pathlib import Path

from app.control.models import installed_models
from engine.models.catalog import CATALOG
from tests.conftest import model_path


def test_the_models_folder_lists_chat_models_only(tmp_path: Path) -> None:
    for key in ("test", "embed"):
        (tmp_path / model_path(key).name).symlink_to(model_path(key))
    assert installed_models(tmp_path) == [tmp_path / model_path("test").name]


def test_the_pickers_do_not_offer_the_embedding_model(window) -> None:
    embed = model_path("embed")  # in the real models folder, which the window lists
    for combo in (window.models.target_combo, window.models.draft_combo):
        names = [combo.itemText(i) for i in range(combo.count())]
        assert CATALOG["embed"].display_name not in names
        assert combo.findData(str(embed)) < 0
        assert combo.findData(str(model_path("test"))) >= 0


def test_an_embedding_model_chosen_by_hand_is_refused_in_one_line(window) -> None:
    embed = model_path("embed")
    window.models.set_choice(embed)  # (Browse…, or dropped on the window)
    window.flow.load(embed)
    notice = window.state.notice
    assert notice is not None and notice.kind == "error" and "\n" not in notice.text
    assert "embedding model" in notice.text and window.state.loading is None
    assert window.models.target_combo.findData(str(embed)) < 0  # taken off the list again
