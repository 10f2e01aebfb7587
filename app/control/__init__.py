"""The window's state and controllers, without widgets: the observed AppState, the chat flow, the
conversations as files, settings, searching, tool rounds, imports and exports, projects,
dictation, the collector's pauses (QtCore at most; the microphone: Qt Multimedia, loaded when it is used).

May import: app.engine_link, engine."""
