"""How much of the context a conversation takes (engine.prompts.size), with the real SmolLM2
(a chat template) and Gemma 3 270M (none: one text to continue)."""

from __future__ import annotations

from engine.chat.fit import chat_tokens
from engine.chat.messages import Attachment, Message
from engine.prompts.completion import completion_text
from engine.prompts.size import context_use

TALK = (Message("system", "Be brief."), Message("user", "Name a colour."),
        Message("assistant", "Blue."))


def test_a_conversation_takes_its_rendered_tokens(smol, gemma):
    assert context_use(smol, TALK, 4096) == len(chat_tokens(smol, TALK, add_generation_prompt=False))
    assert context_use(gemma, TALK, 4096) == len(gemma.tokenize_text(completion_text(TALK)))
    assert context_use(smol, TALK, 10) == 10  # never more than the context
    assert context_use(smol, (), 4096) == 0


def test_an_attached_file_counts_with_its_message(smol):
    garden = Attachment("garden.txt", "text", "ab" * 32, "Tomatoes grow by the south wall. " * 20,
                        mode="whole")
    with_file = (Message("user", "What grows there?", attachments=(garden,)),)
    without = (Message("user", "What grows there?"),)
    assert context_use(smol, with_file, 4096) > context_use(smol, without, 4096) + 100
