"""Models from Hugging Face: search, file lists, remote GGUF headers, fit estimates, resumable
downloads, draft pairing and per-model settings. Engine side: no Qt here.

Everything goes through ``huggingface_hub`` (its ``HfApi``, metadata helpers and configured HTTP
session), honouring ``HF_ENDPOINT`` and ``HF_TOKEN`` at call time.
"""
