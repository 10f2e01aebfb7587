"""Reading the prompt while the person types: the message being written, in the conversation
shown, becomes the prompt sending it now would make (its system prompt, tools, sampling and
thinking as a send would have them), and the engine reads it while nothing else runs. Enter then
finds all of it read but its last token. No Qt of its own.
"""

from __future__ import annotations

from app.control.conversation_settings import ConversationSettings
from app.control.settings import Settings
from app.control.state import AppState
from app.control.tool_flow import ToolFlow
from app.engine_link.client import EngineClient
from engine.chat.messages import Attachment, Image
from engine.conversation.tree import Conversation


class TypedPrompt:
    def __init__(self, client: EngineClient, settings: Settings, state: AppState,
                 chat_settings: ConversationSettings, tool_flow: ToolFlow) -> None:
        self.client, self.settings, self.state = client, settings, state
        self.chat_settings, self.tool_flow = chat_settings, tool_flow

    def typing(self, text: str, attachments: tuple[Attachment, ...] = (),
               pictures: tuple[Image, ...] = ()) -> None:
        """The person is writing ``text`` (with ``attachments`` and ``pictures``): the engine
        reads the prompt that sending it now would make (setting read_ahead). More typing
        changes only the prompt's end: what it no longer shares (the last word, the template's
        closing tokens) is cut back and read anew. Nothing to read: it stops."""
        certain = text.strip()
        library = self.state.library
        if not self.settings["read_ahead"] or library.generating or self.state.model is None \
                or not (certain or attachments or pictures):
            self.client.read_typing("", None)
            return
        shown = library.current
        conv = shown if shown is not None and shown.loaded else None
        system = self.settings["system_prompt"] if conv is None else \
            self.chat_settings.system_prompt(conv)
        if conv is not None:
            attachments = self.chat_settings.files_for(conv, attachments)
        messages = (conv or Conversation()).next_messages(certain, system, attachments, pictures)
        tools = self.tool_flow.tools_for(conv, first=True)[0] if conv is not None else ()
        self.client.read_typing(conv.id if conv is not None else "", messages,
                                self.chat_settings.sampling_for(conv), tools,
                                self.chat_settings.thinking_for(conv))
