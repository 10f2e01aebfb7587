"""Anthropic's dialect:

- ``messages``: the routes of ``/v1/messages`` and ``/v1/messages/count_tokens``, their bodies
  and replies, streamed or not.
"""
