"""Typed errors. Each carries a one-line message fit to show a user as it is."""


class DuetError(Exception):
    """Base of every error the engine raises on purpose."""


class ModelLoadError(DuetError):
    """A model file is missing, is not GGUF, has an unsupported architecture, or does not fit."""


class LoadCancelled(ModelLoadError):
    """A model load was cancelled on request."""


class ContextFullError(DuetError):
    """A decode would go past the context size. Recoverable: nothing was decoded."""


class CellsFullError(ContextFullError):
    """The cells the sequences share are all taken (each sequence still had room of its own)."""


class MessageTooLongError(ContextFullError):
    """The last message cannot fit the context even with every older turn dropped: ``room``
    tokens are left for it (``n_tokens``: its size, when it was counted)."""

    def __init__(self, room: int, n_tokens: int | None = None) -> None:
        size = f"{n_tokens} tokens, " if n_tokens is not None else ""
        super().__init__(f"the message is too long for the context ({size}room for {room} tokens)")
        self.room, self.n_tokens = room, n_tokens


class RewindError(DuetError):
    """The KV cache cannot be partially removed (for example a recurrent model)."""


class DecodeError(DuetError):
    """llama_decode failed."""


class TemplateError(DuetError):
    """A chat template failed to render, or tried something the sandbox forbids."""


class SessionError(DuetError):
    """A session file is corrupt, foreign, truncated or from a newer format."""


class FetchError(DuetError):
    """A starter model could not be fetched or failed its checksum."""


class AudioError(DuetError):
    """Audio that cannot be transcribed: empty, not audio, a truncated WAV, or too long."""


class WorkerLostError(DecodeError):
    """An RPC worker holding part of the model went away; the model cannot be used any more."""


# A closed stdout ends a command as this signal would: exit status 128 + 13, as a shell reports
# it (Python ignores the signal itself and raises BrokenPipeError; Windows has no number for it).
SIGPIPE = 13
