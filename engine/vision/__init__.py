"""Images in the chat: pictures decoded and bounded (Pillow) before libmtmd sees them, and the
projector (``mmproj-*.gguf``) found beside its model and checked by its header.

May import: llama, models.
"""
