"""The conversation model, without Qt: a tree of message versions, the path shown, presets.

The GUI's views subscribe to a ``Conversation``'s changes (plain callbacks), as napari's
viewer listens to its layers; tests drive the model with no display.

May import: models, llama, cache, decode, chat, tools, documents, prompts, runtime.
"""

from engine.conversation.tree import Change, Conversation, Node, Turn

__all__ = ["Change", "Conversation", "Node", "Turn"]
