"""What a conversation's replies are made with, on top of the settings: its system prompt (its
own, its project's, its project's preset's, the settings'), its project's files (on its first
message), its preset's sampling and drafter (its own preset's, else its project's), and whether
a reasoning model thinks first. Kept in the
conversation (its file's settings) and its project, changed from the window's preset menu,
project menu and Think switch. No Qt of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from app.control.settings import SAMPLING_KEYS, Settings, sampling_params
from app.control.state import AppState
from engine.chat.messages import Attachment
from engine.conversation.presets import Preset
from engine.conversation.tree import Conversation
from engine.decode.sampling import SamplingParams

Notify = Callable[[Conversation, str, str], None]  # (conversation, text, kind)


class ConversationSettings:
    """``new()`` makes the conversation a switch applies to when none is shown;
    ``project_prompt(conv)``, ``project_preset(conv)`` and ``project_files(conv)`` are the system
    prompt, preset and files of ``conv``'s project, if it has them (app.control.projects sets
    them)."""

    def __init__(self, settings: Settings, state: AppState, notify: Notify,
                 new: Callable[[], Conversation]) -> None:
        self.settings, self.state, self.notify, self.new = settings, state, notify, new
        self.library = state.library
        self.project_prompt: Callable[[Conversation], str | None] = lambda conv: None
        self.project_preset: Callable[[Conversation], Preset | None] = lambda conv: None
        self.project_files: Callable[[Conversation], tuple[Attachment, ...]] = lambda conv: ()

    def system_prompt(self, conv: Conversation) -> str:
        """The conversation's own (its preset's), else its project's, else its project's
        preset's, else the settings'."""
        if "system_prompt" in conv.settings:
            return conv.settings["system_prompt"]
        preset = self.project_preset(conv)
        return self.project_prompt(conv) or (preset.system_prompt if preset is not None else
                                             "") or self.settings["system_prompt"]

    def files_for(self, conv: Conversation,
                  attachments: tuple[Attachment, ...]) -> tuple[Attachment, ...]:
        """The files of ``conv``'s next message: on its first, its project's files before the
        ones the person attached (a file in both goes once); later, the attached ones only
        (the first message keeps the project's: every turn's prompt begins with them)."""
        if any(t.role == "user" for t in conv.turns):
            return attachments
        own = {a.sha256 for a in attachments}
        return tuple(a for a in self.project_files(conv) if a.sha256 not in own) + attachments

    def sampling_for(self, conv: Conversation | None) -> SamplingParams:
        """The settings' sampling, with its project's preset's on top, and the conversation's
        own values (its preset) on top of that."""
        values = dict(self.settings.values)
        if conv is not None:
            preset = self.project_preset(conv)
            if preset is not None:
                values.update({k: v for k, v in preset.chat_settings().items()
                               if k in SAMPLING_KEYS})
            values.update({k: v for k, v in conv.settings.items() if k in SAMPLING_KEYS})
        return sampling_params(values)

    def drafts(self, conv: Conversation) -> bool:
        """Whether ``conv``'s replies may be drafted: not when its preset (its own, else its
        project's) turns drafting off."""
        own = conv.settings.get("drafter")
        preset = self.project_preset(conv)
        return (own if own is not None else preset.drafter if preset is not None else "") != "none"

    def thinking_for(self, conv: Conversation | None) -> bool | None:
        """Whether a reasoning model thinks before its replies in ``conv`` (its own switch, else
        the setting); None for a model that does not think (its replies are as they were)."""
        if self.state.model is None or not self.state.model.thinks:
            return None
        own = conv.settings.get("thinking") if conv is not None else None
        return bool(self.settings["thinking"] if own is None else own)

    def set_thinking(self, on: bool) -> None:
        """The Think switch: the conversation shown thinks before its next replies, or not
        (kept in its file; the next reply's prompt says so, nothing before it changes)."""
        shown = self.library.current
        conv = shown if shown is not None and shown.loaded else self.new()
        if conv.settings.get("thinking", self.settings["thinking"]) == on:
            return
        conv.settings = {**conv.settings, "thinking": on}
        conv.dirty = conv.dirty or bool(conv.turns)
        conv.notify("meta")

    def apply_preset(self, preset: Preset, conv: Conversation | None = None) -> None:
        """Give ``conv`` (the one shown) ``preset``: its system prompt, sampling and drafter.
        With history, a changed system prompt becomes a new version of the first message and
        nothing after it can come from the cache: the chat says so. A drafter of "none" turns
        drafting off for this conversation's replies at once; another drafter is a model-load
        setting (the window says "at the next load")."""
        conv = conv or self.library.current
        if conv is None or conv.id == self.library.generating:
            return
        conv.preset = preset.name
        conv.settings = {**preset.chat_settings(), "drafter": preset.drafter}
        conv.dirty = conv.dirty or bool(conv.turns)
        conv.notify("meta")
        if conv.turns:
            after = conv.set_system(preset.system_prompt)
            if after:
                self.notify(conv, f"The system prompt changed: the {after} messages after it "
                            "will be processed again at the next reply (nothing after the "
                            "change is reused). The previous prompt is kept as version 1 "
                            "of the first message.", "info")
        if preset.drafter != "none" and self.settings["drafter"] != preset.drafter:
            self.settings.set("drafter", preset.drafter)  # the window says "at the next load"
