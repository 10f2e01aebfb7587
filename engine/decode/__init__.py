"""Decoding: one reply's state (decoding), the one loop that puts every reply's next tokens into a
batch (scheduler), sampling, grammars (constraint), stop strings, and speculation (speculative/).

May import: models, llama, cache, chat."""
