"""``python -m bench soak``: the server under concurrent streaming clients for minutes.

Starts ``duet-cli serve`` as its own process on a free loopback port (so that its RSS is the
server's alone), sends every request of the plan alone (greedy) twice, in order and then in
reverse, and keeps those replies; then ``--clients`` threads send scripts from the plan for
``--minutes``, streaming or not as each request says, some dropping their stream on purpose
(then checking /health), a 429 waited out per its ``Retry-After`` and counted. Every completed
reply is compared with the solo one; the server's RSS is sampled every ``--sample-s``. Writes
JSON and a Markdown section (``## Soak``, into ``--out``, default docs/benchmarks/server.md).

``command`` runs it, ``plan`` says what is sent and judges what comes back, ``margin`` measures
how close a call a differing reply was, ``report`` writes its Markdown section.
"""
