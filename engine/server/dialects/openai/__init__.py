"""OpenAI's dialect:

- ``chat``: the routes of ``/v1/chat/completions`` and ``/v1/completions``, streamed or not;
- ``chat_replies``: their response bodies and stream chunks, logprobs and timings;
- ``responses``: the route of ``/v1/responses`` (the Responses API);
- ``responses_body``: its request body, checked;
- ``responses_reply``: its replies and stream events;
- ``response_store``: the responses kept for a later request's previous_response_id.
"""
