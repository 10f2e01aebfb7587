"""Pure logic of speculative decoding: the accept step, the n-gram drafter, the draft-length controller.

May import: models, llama, cache, decode.sampling.
"""
