"""An OpenAI-compatible local HTTP server over one Duet runtime (``duet-cli serve``)."""
