"""The window's state and controllers, without widgets: the observed AppState, the chat flow, the
conversations as files, settings, searching, tool rounds (QtCore at most).

May import: app.engine_link, engine."""
