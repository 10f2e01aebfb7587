"""``duet-cli``: the command line, one module per command (main: the parser, generate).
It is the top of the engine: it may import any of it.

May import: everything."""
