"""Each format's sample (tests/data/imports/, written from the format's description) imported
and checked message by message: the branch shown, the versions, system and tool messages,
placeholders for files the export does not carry, titles, times; and Duet's own exports back."""

from __future__ import annotations

import json
import os
import zipfile
from datetime import UTC, datetime

from conftest import DATA, saved

from engine.conversation import export
from engine.conversation.importers import import_files
from engine.conversation.search_index import SearchIndex
from engine.conversation.session.store import open_contexts
from engine.conversation.tree import Conversation, Turn
from engine.events import Done, Stats


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()


def test_chatgpt_tree_branches_hidden_tools_and_missing_files(home):
    report = import_files([DATA / "chatgpt-conversations.json"])
    assert len(report.added) == 2 and report.failed == [] and report.skipped == 0
    got = saved(home)
    japan = got["Hauptstadt von Japan 🗾"]
    assert japan.shown == [
        ("system", "The user provided the following information about themselves: I live in "
                   "Zürich.\n\nThe user provided the additional info about how they would like "
                   "you to respond: Be brief."),
        ("user", "[image not in the export: file-Map7Qx2]\n\nWie heißt die Hauptstadt von "
                 "Japan? 日本の首都は？\n\n[file not in the export: reise-notizen.pdf]"),
        ("assistant", "Die Hauptstadt ist **Tokio** (東京)."),
        ("user", "Wie viele Einwohner? Rechne 14 * 1000000."),
        ("assistant", ""),
        ("tool", "14000000"),
        ("assistant", "Etwa 14 Millionen Menschen."),
    ]  # the empty hidden system message is dropped
    turns = japan.conv.turns
    assert [(c.name, c.arguments) for c in turns[4].tool_calls] == [
        ("python", '{"input": "14 * 1000000"}')]
    assert (turns[5].tool_call_id, turns[5].name) == (turns[4].tool_calls[0].id, "python")
    assert japan.conv.versions(2) == (2, 2)  # the regenerated answer, shown on current_node's path
    japan.conv.switch(2, -1)
    assert japan.conv.turns[2].text == "Tokio." and len(japan.conv.turns) == 3
    assert turns[1].time == 1717236001.0 and turns[0].time == 1717236000.123456  # none: the chat's
    assert japan.meta.created == "2024-06-01T10:00:00+00:00"
    assert japan.path.stat().st_mtime == 1717239600.5  # listed by its last change
    assert japan.imported["id"] == "6659a1b0-0c1e-8004-9d4f-1f2e3d4c5b6a"
    assert japan.imported["model"] == "gpt-4o" and japan.meta.kv_target is None
    haiku = got["Haiku"]
    assert haiku.shown == [("system", "You are a poet."), ("user", "A haiku about rain"),
                           ("assistant", "<think>\nFive, seven, five syllables.\n</think>"),
                           ("assistant", "Soft rain on the roof")]  # the empty recap: dropped
    assert haiku.conv.versions(1) == (1, 2)  # an edited question: the first one is current
    haiku.conv.switch(1, 1)
    assert haiku.shown[1:] == [("user", "A haiku about snow ❄"),
                               ("assistant", "White hush on the pines")]


def test_chatgpt_zip_as_downloaded(home, tmp_path):
    z = tmp_path / "export.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(DATA / "chatgpt-conversations.json", "conversations.json")
        zf.writestr("chat.html", "<html></html>")
        zf.writestr("user.json", "{}")
    assert len(import_files([z]).added) == 2
    assert set(saved(home)) == {"Hauptstadt von Japan 🗾", "Haiku"}


def test_claude_branches_attachments_and_files(home):
    report = import_files([DATA / "claude-conversations.json"])
    assert len(report.added) == 2 and report.failed == []
    got = saved(home)
    cv = got["Résumé review ✍️"]
    assert cv.shown == [
        ("user", "Can you review my CV? Also see the photo.\n\n[file not in the export: portrait.jpg]"),
        ("assistant", "Your CV reads well. Lead with skills."),
        ("user", "Thanks! 謝謝"),
        ("assistant", "You're welcome!"),
    ]
    [cv_file] = cv.conv.turns[0].attachments
    assert cv_file.name == "cv-müller.txt" and cv_file.text.startswith("Jürgen Müller")
    assert cv.conv.versions(1) == (2, 2)  # the retry that the conversation went on from
    cv.conv.switch(1, -1)
    assert cv.conv.turns[1].text == ("<think>\nThe CV is short; suggest numbers.\n</think>\n\n"
                                     "Your CV is concise. Add measurable results — e.g. “cut "
                                     "costs 20 %”.")
    assert cv.conv.turns[0].time == ts("2024-11-03T09:15:23.109862")
    assert cv.meta.created == "2024-11-03T09:15:22+00:00"
    untitled = got["ping"]  # no name: titled by its first question, as the window does
    assert untitled.shown == [("user", "ping"), ("assistant", "pong")]


def test_open_webui_history_system_prompt_and_files(home):
    assert len(import_files([DATA / "openwebui-export.json"]).added) == 1
    chat = saved(home)["🐍 Python-Listen sortieren"]
    assert chat.shown == [
        ("system", "Du bist ein hilfreicher Assistent. Antworte auf Deutsch."),
        ("user", "Wie sortiere ich eine Liste absteigend?\n\n[file not in the export: daten.csv]"),
        ("assistant", "`xs.sort(reverse=True)` sortiert an Ort und Stelle; `sorted(xs, "
                      "reverse=True)` gibt eine neue Liste zurück."),
        ("user", "Und nach Länge? ✨\n\n[image not in the export: image]"),
        ("assistant", "`sorted(xs, key=len, reverse=True)`"),
    ]
    assert chat.conv.versions(2) == (2, 2)
    chat.conv.switch(2, -1)
    assert chat.conv.turns[2].text == "Mit `sorted(xs, reverse=True)`."
    assert chat.conv.turns[1].time == 1722500000 and chat.imported["model"] == "llama3.1:8b"
    assert chat.imported["id"] == "b7e1c6a2-4f0d-4c1e-9a57-3d2f1e0c9b8a"


def test_lm_studio_versions_and_files(home):
    assert len(import_files([DATA / "lmstudio.conversation.json"]).added) == 1
    chat = saved(home)["Übersetzung ins Japanische"]
    assert chat.shown == [
        ("system", "You translate into Japanese. Reply with the translation only."),
        ("user", "Translate: good morning\n\n[image not in the export: sign.png]"),
        ("assistant", "おはようございます"),
        ("user", "And: thank you"),
        ("assistant", "ありがとうございます"),
    ]
    assert chat.conv.versions(2) == (2, 2)
    chat.conv.switch(2, -1)
    assert chat.shown[2] == ("assistant", "おはよう") and len(chat.shown) == 3
    assert chat.meta.created == "2025-01-01T00:00:00+00:00"
    assert chat.imported["model"] == "lmstudio-community/qwen2.5-7b-instruct"


def test_llama_cpp_web_ui_tree_thinking_and_extras(home):
    assert len(import_files([DATA / "llamacpp-conversation.json"]).added) == 1
    chat = saved(home)["Fibonacci in C — schnell?"]
    assert chat.path.name == "Fibonacci in C — schnell.duet"  # named as the window names files
    assert chat.shown == [
        ("system", "You are a C expert."),
        ("user", "Write fib in C. See my attempt and the screenshot.\n\n"
                 "[image not in the export: error.png]"),
        ("assistant", "<think>\nRecursion is exponential.\n</think>\n\n"
                      "An iterative version is O(n): `for (...)`."),
        ("user", "Danke! Und mit Memoisierung? 🚀"),
        ("assistant", "Keep an array of computed values."),
        ("user", "Perfekt."),
    ]
    [fib] = chat.conv.turns[1].attachments
    assert fib.name == "fib.c" and "fib(n-1)" in fib.text
    assert chat.conv.versions(2) == (2, 2)
    assert chat.conv.turns[1].time == 1736000010.0
    assert chat.path.stat().st_mtime == 1736000300.0


def done(text: str) -> Done:
    return Done("stop", text, (), Stats())


def test_llama_cpp_web_ui_export_of_all_with_tools_and_reasoning(home):
    assert len(import_files([DATA / "llamacpp-all-conversations.json"]).added) == 1
    chat = saved(home)["Wetter in Kyōto"]
    assert chat.shown == [
        ("user", "Wie wird das Wetter in Kyōto? Mein Reiseplan ist angehängt.\n\n"
                 "[audio not in the export: frage.mp3]"),
        ("assistant", "<think>\nI should call the weather tool.\n</think>\n\n"),
        ("tool", '{"temp_c": 24, "sky": "sonnig ☀"}'),
        ("assistant", "Sonnig bei 24 °C — perfekt für Fushimi Inari."),
    ]
    turns = chat.conv.turns
    [plan] = turns[0].attachments
    assert (plan.name, plan.text) == ("reiseplan.pdf", "Tag 1: Kyōto, Fushimi Inari")
    assert [(c.id, c.name, c.arguments) for c in turns[1].tool_calls] == [
        ("call_w1", "get_weather", '{"city":"Kyōto"}')]
    assert turns[2].tool_call_id == "call_w1"
    assert chat.conv.versions(3) == (2, 2) and chat.imported["model"] == "qwen3-4b"
    assert chat.imported["id"] == "5d2c1b0a-7e6f-4d3c-9b8a-112233445566"


def sample_conversation() -> Conversation:
    conv = Conversation("Round trip ✓")
    conv.add_user("First question ü", system_prompt="Be kind.")
    conv.begin_reply()
    conv.finish_reply(done("Answer one"))
    conv.begin_reply(2)
    conv.finish_reply(done("Answer two\n\n```py\nprint('## You · 2020-01-01 10:00')\n```"))
    conv.add_user("Next 🙂")
    conv.begin_reply()
    conv.finish_reply(done("Done."))
    for i, node in enumerate(conv.walk()):
        node.turn.time = 1_700_000_000 + 60 * i
    return conv


def test_duet_json_and_markdown_exports_come_back(home, tmp_path):
    conv = sample_conversation()
    export.export(conv, tmp_path / "round.json")
    export.export(conv, tmp_path / "round.md")
    report = import_files([tmp_path / "round.json"])
    assert len(report.added) == 1
    back = saved(home)["Round trip ✓"]
    assert back.shown == [(t.role, t.text) for t in conv.turns]
    assert back.conv.versions(2) == conv.versions(2) == (2, 2)  # every version, from the tree
    assert [t.time for t in back.conv.turns] == [t.time for t in conv.turns]
    back.path.unlink()
    assert len(import_files([tmp_path / "round.md"]).added) == 1
    md = saved(home)["Round trip ✓"]
    assert md.shown == [(t.role, t.text) for t in conv.turns]  # the branch shown
    assert [t.time for t in md.conv.turns] == [t.time - t.time % 60 for t in conv.turns]


def test_duet_markdown_with_a_tool_result(home, tmp_path):
    conv = Conversation("Tools")
    conv.set_messages([])
    conv.root.add(Turn("user", "What time is it?", time=1_700_000_000)).add(
        Turn("tool", "12:00 ```not a fence```", name="clock", time=1_700_000_060))
    (tmp_path / "t.md").write_text(export.to_markdown(conv), encoding="utf-8")
    assert len(import_files([tmp_path / "t.md"]).added) == 1
    back = saved(home)["Tools"]
    assert back.shown == [("user", "What time is it?"), ("tool", "12:00 ```not a fence```")]
    assert back.conv.turns[1].name == "clock"


def test_a_second_import_adds_nothing_and_all_are_searchable(home):
    files = sorted(DATA.glob("*.json"))
    first = import_files(files)
    assert len(first.added) == 8 and first.failed == []
    before = {p: p.read_bytes() for p in home.glob("*.duet")}
    second = import_files(files)
    assert second.added == [] and second.skipped == 8 and second.failed == []
    assert {p: p.read_bytes() for p in home.glob("*.duet")} == before
    index = SearchIndex()
    listed = sorted(home.glob("*.duet"))
    assert [p.name for p in index.search("東京", listed)] == ["Hauptstadt von Japan 🗾.duet"]
    assert [p.name for p in index.search("müller", listed)] == ["Résumé review ✍️.duet"]
    assert len(index.search("tokio.", listed)) == 1  # another version than the one shown
    index.close()
    # renamed in the window: found again by its key (nothing added)
    (home / "Haiku.duet").rename(home / "Poems.duet")
    again = import_files(files)
    assert again.added == [] and again.skipped == 8 and not (home / "Haiku.duet").exists()
    # deleted in the window: importing again brings it back, once
    (home / "Poems.duet").unlink()
    third = import_files(files)
    assert [p.name for p in third.added] == ["Haiku.duet"] and third.skipped == 7


def test_progress_reports_each_record(home):
    seen = []
    import_files([DATA / "chatgpt-conversations.json"], progress=seen.append)
    assert [(p.added, p.skipped, p.failed) for p in seen] == [(1, 0, 0), (2, 0, 0)]
    assert seen[-1].done_bytes == seen[-1].total_bytes == os.path.getsize(
        DATA / "chatgpt-conversations.json")


def test_every_sample_opens_as_a_saved_conversation(home):
    import_files(sorted(DATA.glob("*.json")))
    for chat in saved(home).values():
        opened = open_contexts(chat.path, None)
        assert [(m.role, m.content) for m in opened.messages] == chat.shown
        assert not opened.restored_kv and chat.meta.kv_target is None  # no KV state computed
        assert opened.settings["title"] == chat.conv.title


def test_an_export_of_a_grown_conversation_replaces_its_untouched_import(home, tmp_path):
    export_file = DATA / "chatgpt-conversations.json"
    import_files([export_file])
    path = home / "Haiku.duet"
    grown = json.loads(export_file.read_text(encoding="utf-8"))
    haiku = grown[1]
    haiku["mapping"]["a-b1"]["children"] = ["u-b3"]
    haiku["mapping"]["u-b3"] = {"id": "u-b3", "parent": "a-b1", "children": [], "message": {
        "author": {"role": "user"}, "create_time": 1700000200.0,
        "content": {"content_type": "text", "parts": ["One more?"]}}}
    haiku["current_node"], haiku["update_time"] = "u-b3", 1700000200.0
    later = tmp_path / "conversations.json"
    later.write_text(json.dumps(grown), encoding="utf-8")
    report = import_files([later])
    assert (report.added, report.updated, report.skipped) == ([], [path], 1)
    assert saved(home)["Haiku"].shown[-1] == ("user", "One more?")
    assert import_files([export_file]).skipped == 2  # the older export: nothing goes back
    # continued in Duet since: a newer export comes in beside it, the file is left alone
    os.utime(path, (1700000300.0, 1700000300.0))
    before = path.read_bytes()
    haiku["update_time"], haiku["title"] = 1700000400.0, "Haiku"
    haiku["mapping"]["u-b3"]["message"]["content"]["parts"] = ["One more, please?"]
    later.write_text(json.dumps(grown), encoding="utf-8")
    report = import_files([later])
    assert [p.name for p in report.added] == ["Haiku (2).duet"] and report.updated == []
    assert path.read_bytes() == before


def test_a_lost_or_damaged_ledger_is_built_again_from_the_files(home):
    files = sorted(DATA.glob("*.json"))
    assert len(import_files(files).added) == 8
    ledger = home / ".imports.sqlite3"
    for name in (ledger.name, ledger.name + "-wal", ledger.name + "-shm"):
        ledger.with_name(name).unlink(missing_ok=True)
    assert import_files(files).skipped == 8
    ledger.write_bytes(b"this is no database" * 100)
    for name in (ledger.name + "-wal", ledger.name + "-shm"):
        ledger.with_name(name).unlink(missing_ok=True)
    assert import_files(files).skipped == 8 and len(list(home.glob("*.duet"))) == 8


def test_an_export_that_lacks_a_message_never_replaces_an_import(home, tmp_path):
    export_file = DATA / "chatgpt-conversations.json"
    import_files([export_file])
    path = home / "Haiku.duet"
    before = path.read_bytes()
    shrunk = json.loads(export_file.read_text(encoding="utf-8"))
    mapping = shrunk[1]["mapping"]
    del mapping["u-b2"], mapping["a-b2"]  # the other version of the question is gone
    mapping["s-b"]["children"] = ["u-b1"]
    later = tmp_path / "conversations.json"
    later.write_text(json.dumps(shrunk), encoding="utf-8")
    report = import_files([later])
    assert [p.name for p in report.added] == ["Haiku (2).duet"] and report.updated == []
    assert path.read_bytes() == before
