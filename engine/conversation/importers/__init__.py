"""Conversations from other apps into ``.duet`` files: one small reader per format (chatgpt,
claude, openwebui, lmstudio, llamacpp, duet's own exports), the registry that tells them apart
(registry), records read one at a time from a large export (records), and the import itself:
files written as the window saves them (run), a ledger that makes it idempotent (ledger), the search index
updated. No Qt, no llama.cpp.

May import: chat, conversation.tree, conversation.store, conversation.export, conversation.session,
conversation.search_index, conversation.archive, conversation.projects.
"""

from engine.conversation.importers.base import Imported, ImportFailure
from engine.conversation.importers.run import ImportReport, import_files

__all__ = ["ImportFailure", "ImportReport", "Imported", "import_files"]
