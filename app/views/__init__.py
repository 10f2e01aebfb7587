"""The window's views: widgets and dialogs (QtWidgets, QtGui). They build and lay out, observe the
state in app.control and send the person's actions to it.

May import: app.control, app.engine_link, engine."""
