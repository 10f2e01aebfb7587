"""A conversation about a picture in its ``.duet`` file: the picture's bytes are kept (content
addressed, checked on opening) beside the KV state, so that it reopens with nothing encoded
again; and the disk KV store restores a picture's prompt in a fresh process's runtime."""

from __future__ import annotations

import json

from engine.chat.messages import Image, Message
from engine.cli.main import main
from engine.conversation.session.format import read_meta, read_session
from engine.conversation.session.meta import image_section
from engine.conversation.session.store import open_conversation, save_conversation
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig
from tests.images import picture

GREEDY = SamplingParams(temperature=0, max_tokens=12)
PHOTO = Image(picture(21, (80, 60), "JPEG"), "receipt.jpg")


def runtime(smol_path, projector, kv_store_bytes=0):
    return Runtime(RuntimeConfig(target=ModelSpec(smol_path, mmproj=projector),
                                 context=ContextParams(n_ctx=2048),
                                 speculative=SpeculativeParams(drafter="none"),
                                 kv_store_bytes=kv_store_bytes))


def reply(rt, messages) -> Done:
    done = list(rt.generator.chat(messages, GREEDY))[-1]
    assert isinstance(done, Done)
    return done


def test_a_reopened_conversation_about_a_picture_encodes_nothing(smol_path, smol_projector, tmp_path):
    path = tmp_path / "receipt.duet"
    asked = [Message("user", "What is the total?", images=(PHOTO,))]
    with runtime(smol_path, smol_projector) as rt:
        first = reply(rt, asked)
        talk = asked + [Message("assistant", first.text)]
        save_conversation(path, rt, talk, settings={})
        n_saved = len(rt.ctx.tokens)
        more = talk + [Message("user", "And the date?")]
        warm = reply(rt, more)
    kept = read_session(path, want=[image_section(PHOTO.sha256)]).sections
    assert kept == {image_section(PHOTO.sha256): PHOTO.data}  # the picture's bytes, once
    with runtime(smol_path, smol_projector) as rt:
        opened = open_conversation(path, rt)
        assert opened.restored_kv and opened.note is None
        assert opened.messages[0].images == (PHOTO,)  # the bytes, checked, back
        again = reply(rt, opened.messages + [Message("user", "And the date?")])
        assert rt.target.projector.encoded == 0  # nothing encoded again
        assert again.stats.n_cached_tokens >= n_saved - 1
        assert again.token_ids == warm.token_ids


def test_a_damaged_picture_is_left_out_with_a_note(smol_path, smol_projector, tmp_path):
    path = tmp_path / "damaged.duet"
    with runtime(smol_path, smol_projector) as rt:
        asked = [Message("user", "What is it?", images=(PHOTO,))]
        save_conversation(path, rt, asked + [Message("assistant", reply(rt, asked).text)], settings={})
    raw = bytearray(path.read_bytes())
    at = raw.find(PHOTO.data[100:140])
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    opened = open_conversation(path, None)
    assert "damaged or missing" in opened.note and opened.messages[0].images == ()
    assert read_meta(path).messages[0].images[0].sha256 == PHOTO.sha256  # the file still names it


def test_the_disk_kv_store_restores_a_picture_in_a_new_runtime(smol_path, smol_projector):
    asked = [Message("system", "You read receipts and invoices, and answer briefly. " * 60),
             Message("user", "Total?", images=(PHOTO,))]
    with runtime(smol_path, smol_projector, kv_store_bytes=256 << 20) as rt:
        cold = reply(rt, asked)
    with runtime(smol_path, smol_projector, kv_store_bytes=256 << 20) as rt:
        warm = reply(rt, asked)
        assert rt.target.projector.encoded == 0 and warm.stats.n_cached_tokens > 0
    assert warm.token_ids == cold.token_ids


def test_cli_session_keeps_the_picture(capsys, smol_path, smol_projector, tmp_path):
    session, photo = tmp_path / "cli.duet", tmp_path / "photo.jpg"
    photo.write_bytes(PHOTO.data)
    base = ["generate", "--model", str(smol_path), "--mmproj", str(smol_projector), "--temperature", "0",
            "--max-tokens", "6", "--drafter", "none", "--json", "--session", str(session)]
    assert main([*base, "--image", str(photo), "What is it?"]) == 0
    assert main([*base, "And the colour?"]) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["session"]["restored_kv"] and second["n_cached_tokens"] > 16
    opened = open_conversation(session, None)
    assert opened.messages[0].images == (Image(PHOTO.data, "photo.jpg"),)
