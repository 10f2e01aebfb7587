"""Ollama's dialect:

- ``routes``: ``/api/chat`` and ``/api/generate``, their options and replies;
- ``models``: ``/api/tags``, ``/api/ps`` and ``/api/show``.
"""
