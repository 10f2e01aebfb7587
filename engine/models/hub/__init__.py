"""Models from Hugging Face: search, file lists, remote GGUF headers, fit estimates, resumable
downloads, draft pairing and per-model settings. Engine side: no Qt here.

Everything goes through ``huggingface_hub`` (its ``HfApi``, metadata helpers and configured HTTP
session), honouring ``HF_ENDPOINT`` and ``HF_TOKEN`` at call time.

- ``client``: endpoint, token, API object, URLs, reachability check
- ``errors``: HubError and one-line messages for 401/403/404/offline
- ``search``, ``files``: repositories with GGUF files; a repository's files grouped by quantization
- ``gguf_header`` (pure, bytes in), ``remote_header`` (range requests): what a model is
- ``fit``: memory for weights, KV cache and compute against this machine
- ``download``: resumable, cancellable, SHA-256-verified download into the models folder
- ``pairing``, ``pair_catalog``: which drafts can pair with a target, from headers alone

May import: models.folder, models.pair_reasons, models.projector.
"""
