"""Writing the conversation whose reply streams while it streams, so that a crash or a SIGKILL
loses at most the last CHECKPOINT_S of the reply, never the message sent. Each write is the
text only (the reply so far, marked as cut), atomic, on the GUI thread: it must hold even when
the process ends next. With autosave off nothing is written. QtCore only.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QTimer

from app.control.conversation import unique_path
from app.control.files import ConversationFiles
from app.control.settings import Settings
from app.engine_link.client import EngineClient
from app.engine_link.messages import RescuePlan
from engine import paths
from engine.conversation.library import Library
from engine.conversation.store import streaming_node, tree_to_json
from engine.conversation.tree import Conversation
from engine.errors import DuetError

log = logging.getLogger(__name__)

# A streaming reply is written this often: a crash or SIGKILL loses at most this much of it
# (never the message sent). A text-only write of a conversation takes a few ms.
CHECKPOINT_S = 2.0

class Checkpoints(QObject):
    """``write()`` writes the streaming conversation now and every CHECKPOINT_S after, until
    ``stop()`` or until nothing streams; ``plan(conv)`` is where and how the worker saves
    ``conv`` if the process must end during its reply."""

    def __init__(self, client: EngineClient, settings: Settings, library: Library,
                 files: ConversationFiles, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client, self.settings, self.library, self.files = client, settings, library, files
        self.timer = QTimer(self)
        self.timer.setInterval(int(CHECKPOINT_S * 1000))
        self.timer.timeout.connect(self.write)

    def write(self) -> None:
        conv = self.library.by_id(self.library.generating)
        if conv is None or conv.streaming is None or not self.settings["autosave"]:
            self.timer.stop()
            return
        plan = self.plan(conv)
        conv.path = plan.path  # the reply's own save writes the same file
        try:
            if not self.client.save_cut(plan, conv.engine_messages(), conv.streaming.text):
                return  # no model is loaded
        except (DuetError, OSError) as e:
            log.warning("could not checkpoint %s: %s", plan.path.name, e)
            return
        if not self.timer.isActive():
            self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def plan(self, conv: Conversation) -> RescuePlan:
        """How the worker saves ``conv`` if the process must end during this reply (a lost RPC
        worker): where, and the settings a save would write, with the streaming reply."""
        tree = tree_to_json(conv, streaming=True)
        path = conv.path or unique_path(paths.conversations_dir(), conv.title,
                                        taken=(c.path for c in self.library.conversations
                                               if c.path))
        return RescuePlan(path, self.files.file_settings(conv, tree), streaming_node(conv, tree))
