"""Files attached to a chat: read safely into text (extract, formats), cut into passages
(passages) and retrieved by BM25 over SQLite FTS5 (retrieve); engine.prompts.attachments puts
them into a conversation. No Qt.

May import: models, llama.
"""

from engine.documents.extract import (
           MAX_PACKED_BYTES,
           MAX_TEXT_BYTES,
           Document,
           DocumentError,
           document_from_bytes,
           read_document,
)
from engine.documents.passages import TARGET_CHARS, Passage, split
from engine.documents.retrieve import PassageIndex

__all__ = ["MAX_PACKED_BYTES", "MAX_TEXT_BYTES", "TARGET_CHARS", "Document", "DocumentError", "Passage",
           "PassageIndex", "document_from_bytes", "read_document", "split"]
