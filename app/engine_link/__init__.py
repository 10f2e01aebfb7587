"""The link to the engine thread: the worker QObject that owns the engine, the client the GUI
thread talks to, the messages between them, and the local server over the same engine (QtCore at most).

May import: engine."""
