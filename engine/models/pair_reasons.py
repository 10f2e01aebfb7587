"""Why a draft model cannot draft for a target, in words a person can act on.

One wording for both checks of a pair: the one made when the models load
(``engine.decode.speculative.compat.check_pair``) and the one made from GGUF headers alone
(``engine.models.hub.pairing.check_facts``); both ask in the same order, so a pair gets the same
reason from each. Pure Python.
"""

from __future__ import annotations

# llama.cpp's enum llama_vocab_type, and the GGUF key tokenizer.ggml.model, to the tokenizer's name
VOCAB_TYPE_MODELS = {0: "none", 1: "llama", 2: "gpt2", 3: "bert", 4: "t5", 5: "rwkv", 6: "plamo2"}
TOKENIZER_NAMES = {"none": "none", "llama": "SentencePiece", "gpt2": "byte-level BPE",
                   "bert": "WordPiece", "t5": "Unigram", "rwkv": "RWKV", "plamo2": "PLaMo-2"}


def tokenizer_name(kind: int | str) -> str:
    """The name of a tokenizer type given as llama.cpp's number or as the GGUF's word."""
    model = VOCAB_TYPE_MODELS.get(kind, str(kind)) if isinstance(kind, int) else kind
    return TOKENIZER_NAMES.get(model, model)


def vocabulary_size(target_n: int, draft_n: int) -> str:
    return f"the draft's vocabulary has {draft_n:,} tokens, the target's {target_n:,}"


def tokenizer(target_kind: int | str, draft_kind: int | str) -> str:
    return (f"the draft's tokenizer is {tokenizer_name(draft_kind)}, the target's "
            f"{tokenizer_name(target_kind)}")


def _token(token: int | None) -> str:
    return f"token {token:,}" if token is not None and token >= 0 else "no token"


def _start(add_bos: bool, bos: int | None) -> str:
    return _token(bos) if add_bos else "no start token"


def start_of_text(target: tuple[bool, int | None], draft: tuple[bool, int | None]) -> str:
    """``target``, ``draft``: (whether the model starts a text with a token, that token)."""
    return (f"the draft starts a text with {_start(*draft)}, the target with "
            f"{_start(*target)}")


def end_of_text(target_eos: int | None, draft_eos: int | None) -> str:
    return f"the draft ends a text with {_token(draft_eos)}, the target with {_token(target_eos)}"


def end_of_generation() -> str:
    return "the draft and the target stop on different end-of-turn tokens"


def token_text(token: int, target_text: bytes, draft_text: bytes) -> str:
    return (f"token {token:,} is {draft_text[:20]!r} in the draft but {target_text[:20]!r} in "
            "the target")
