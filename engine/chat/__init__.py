"""Chat messages as the model reads them: the message types, the model's own template in a Jinja
sandbox (messages, template_limits), and fitting a chat into the context (fit).

May import: llama, vision."""
