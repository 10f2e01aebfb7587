"""The main window: conversations on the left; models bar, notices, chat and composer on the right.

It builds and lays out the views, the menus and the controllers, and wires the views' requests to
the controllers (app.control: the chat flow, the model flow). The views follow the app's state
(app.control.state.AppState) by subscription: nothing here updates a view after a change.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QIcon
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QMainWindow,
    QMenu,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.control.composing import Composing
from app.control.controller import ChatController
from app.control.conversation import Conversation, RecentFiles
from app.control.drops import sort_drop
from app.control.exporting import Exporting
from app.control.models import ModelFlow
from app.control.quitting import unfinished
from app.control.settings import Settings
from app.control.state import AppState
from app.engine_link.client import EngineClient
from app.views import dictation_view, file_dialogs, library_jobs, menus, projects_view, theme
from app.views.attachments import Attachments, ChipBar
from app.views.chat_view import ChatView
from app.views.composer import Composer
from app.views.models_panel import FirstRunPanel, ModelsPanel
from app.views.notice import NoticeBar
from app.views.presets import PresetBar
from app.views.settings_dialog import SettingsDialog
from app.views.sidebar import Sidebar
from app.views.status import StatusBar
from app.views.tools_panel import Tools, tools_for
from engine.mcp import config as mcp_config

log = logging.getLogger(__name__)

ICON = Path(__file__).resolve().parents[2] / "resources" / "icons" / "duet.svg"


class MainWindow(QMainWindow):
    ask_before_closing = True  # False: the process is asked to end (a signal); it just does
    notice: NoticeBar  # (made by _build)
    chat_view: ChatView
    composer: Composer
    status: StatusBar
    recent_menu: QMenu  # (made by menus.build)
    exporting: Exporting  # (made by library_jobs.connect)

    def __init__(self, settings: Settings | None = None, *, client: EngineClient | None = None,
                 autoload: bool = True) -> None:
        super().__init__()
        self.settings = settings or Settings(parent=self)
        self.client = client or EngineClient(self)
        self.recent = RecentFiles()
        self.state = AppState()  # the conversations, the model and its load: no Qt
        self.crash: object = None  # app.crash's hooks, installed by app.__main__.create_window
        self.file_open_filter: object = None  # macOS file-open events (app.__main__)
        self.setWindowTitle("Duet")
        if ICON.exists():
            self.setWindowIcon(QIcon(str(ICON)))
        self.setAcceptDrops(True)
        self._build()
        self.composer.edit.setPlainText(self.settings["composer_draft"])  # unsent at the last quit
        self.controller = ChatController(self.client, self.settings, self.recent, self.state,
                                         parent=self)
        self.flow = ModelFlow(self.client, self.settings, self.state, self)  # models and their loads
        self.model_loaded, self.model_failed = self.flow.loaded, self.flow.failed
        self.load_models, self.local_server = self.flow.load, self.flow.local_server
        self._observe()
        self._connect_controller()
        self.importing = library_jobs.connect(self)  # imports (and their progress) off this thread
        self.projects = projects_view.connect(self)  # the projects above the list
        self.dictation = dictation_view.connect(self)  # the microphone beside the composer
        menus.build(self)
        self.settings.changed.connect(self.on_setting_changed)
        self.chat_view.set_highlight_draft(self.settings["highlight_draft"])
        # Methods, not lambdas: PySide queues a method of a QObject to its thread (the signals
        # come from the server's start-up thread) but would run a lambda on the emitting one.
        self.local_server.started.connect(self.status.set_server)
        self.local_server.stopped.connect(self.status.clear_server)
        self.local_server.failed.connect(self.notice.show_error)
        self.controller.start()
        if any(server.enabled for server in mcp_config.load().servers):
            tools_for(self)  # the person's MCP servers start with the window
        self.flow.start(autoload)
        self.resize(1100, 760)

    # -- layout ----------------------------------------------------------------------------
    def _build(self) -> None:
        self.sidebar = Sidebar(self)
        self.sidebar.open_requested.connect(lambda: file_dialogs.open_conversation(self))
        self.sidebar.rename_requested.connect(lambda cid: file_dialogs.rename(self, cid))
        self.models = ModelsPanel(self)
        self.notice = NoticeBar(self)
        self.chat_view = ChatView(self)
        self.composer = Composer(self)
        # files attached to the next message (counted in the loaded model's tokens)
        self.attachments = Attachments(self.client.token_counter, self)
        self.chips = ChipBar(self.attachments, self)
        self.presets = PresetBar(self)
        self.first_run = FirstRunPanel(self)
        self.stack = QStackedWidget(self)
        self.stack.addWidget(self.chat_view)
        self.stack.addWidget(self.first_run)
        right = QWidget(self)
        column = QVBoxLayout(right)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.models)
        notice_row = QVBoxLayout()
        notice_row.setContentsMargins(12, 2, 12, 4)
        notice_row.addWidget(self.notice)
        column.addLayout(notice_row)
        column.addWidget(self.stack, 1)
        column.addWidget(self.presets)
        column.addWidget(self.chips)
        column.addWidget(self.composer)
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(self.sidebar)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([230, 870])
        self.setCentralWidget(splitter)
        self.status = StatusBar(self)
        self.setStatusBar(self.status)

    def _show_thinking(self, *_: object) -> None:
        """The Think switch follows the model (shown for a reasoning one) and the conversation."""
        c = self.controller
        self.composer.show_thinking(c.chat_settings.thinking_for(c.current))

    def _observe(self) -> None:
        """The views follow the app's state; their requests about models go to the model flow."""
        state, flow = self.state, self.flow
        self.notice.observe(state)
        self.status.observe(state)
        self.models.observe(state, self.client.worker_lost)
        self.first_run.observe(state)
        pages = {"chat": self.chat_view, "first_run": self.first_run}
        state.subscribe(lambda what: self.stack.setCurrentWidget(pages[state.page]) if what == "page" else None)
        self.models.load_requested.connect(flow.load)
        self.models.choice_changed.connect(flow.choose)
        self.models.cancel_requested.connect(lambda: self.client.cancel("load"))
        self.first_run.use_requested.connect(flow.use_starters)
        self.first_run.fetch_requested.connect(flow.fetch_starters)
        self.first_run.open_requested.connect(self._first_run_open)
        self.first_run.cancel_requested.connect(lambda: self.client.cancel("fetch"))

    def _connect_controller(self) -> None:
        """The views follow the conversation model; their requests go to the controller."""
        c, library = self.controller, self.controller.library
        for view in (self.chat_view, self.sidebar, self.status, self.notice, self.presets):
            view.follow(library)
        self.presets.chosen.connect(c.chat_settings.apply_preset)
        # the message being written: read ahead as it is typed, then sent (app.control.composing)
        self.composing = Composing(c, self.attachments, self.composer.edit.toPlainText,
                                   self._refuse_send, self)
        self.composer.send_requested.connect(self.composing.send)
        self.composer.stop_requested.connect(c.stop)
        self.composer.attach_requested.connect(self._choose_attachments)
        self.composer.files_given.connect(self.attach)
        self.composer.picture_given.connect(self.attachments.add_picture)
        self.composer.thinking_toggled.connect(c.chat_settings.set_thinking)
        c.current_changed.connect(self._show_thinking)
        c.conversation_opened.connect(self._show_thinking)  # (its file's own switch)
        self.flow.state.subscribe(lambda what: self._show_thinking() if what == "model" else None)
        self.flow.state.subscribe(
            lambda what: self.composer.show_sight(self.state.model) if what == "model" else None)
        self.attachments.failed.connect(self.notice.show_error)
        self.chat_view.regenerate_requested.connect(c.regenerate)
        self.chat_view.edit_requested.connect(c.edit)
        self.chat_view.switch_requested.connect(c.switch)
        self.chat_view.continue_requested.connect(c.continue_reply)
        self.chat_view.tool_answered.connect(c.answer_tool)
        c.tools_source = lambda: self.findChild(Tools)
        self.sidebar.selected.connect(c.select)
        self.sidebar.new_requested.connect(c.new)
        self.sidebar.delete_requested.connect(c.files.delete)
        search = self.sidebar.searcher  # the search index follows the files
        c.conversation_saved.connect(lambda saved: search.saved(saved.path))
        c.file_renamed.connect(search.renamed)
        c.file_deleted.connect(search.deleted)
        c.generating_changed.connect(self.composer.set_generating)
        c.generating_changed.connect(self.chat_view.set_busy)
        c.message.connect(self.status.showMessage)
        c.draft_returned.connect(self.composer.give_back)
        c.current_changed.connect(self._update_title)
        c.model_suggested.connect(self.flow.bring_back)
        typing = self.composing
        self.composer.edit.textChanged.connect(typing.keyed)
        self.attachments.changed.connect(typing.changed)
        c.current_changed.connect(typing.changed)  # another conversation: its prompt
        c.generating_changed.connect(lambda busy: None if busy else typing.changed())

    def _update_title(self, conv: Conversation | None) -> None:
        self.setWindowTitle(f"{conv.title} — Duet" if conv is not None else "Duet")

    # -- models, settings, window events, attached files ---------------------------------
    def _first_run_open(self) -> None:
        path = self.models.browse()
        if path is not None:
            self.flow.load(path, None)

    def browse_model(self, as_draft: bool) -> None:
        path = self.models.browse(as_draft)
        if path is not None:
            self.models.set_choice(path, as_draft=as_draft)

    def on_setting_changed(self, name: str) -> None:
        """The look applies at once (the model flow takes the settings about models)."""
        if name == "theme":
            theme.apply_theme(cast(QApplication, QApplication.instance()), self.settings[name])
            self.chat_view.restyle()
        elif name == "highlight_draft":
            self.chat_view.set_highlight_draft(self.settings[name])

    def settings_dialog(self) -> SettingsDialog:
        dialog = SettingsDialog(self.settings, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        self.take_files([Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()])
        event.acceptProposedAction()

    def take_files(self, files: list[Path]) -> None:
        """Each file dropped where app.control.drops sends it."""
        dropped = sort_drop(files)
        for path in dropped.conversations:
            self.controller.files.open_path(path)
        if dropped.imported:
            self.importing.start(list(dropped.imported))
        self.attach(list(dropped.attached))
        if dropped.model is not None:
            self.models.handle_drop(dropped.model)

    def attach(self, paths: list[Path]) -> None:
        for path in paths:
            self.attachments.add(Path(path))

    def _choose_attachments(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(
            self, "Attach files", str(Path.home()),
            "Documents and pictures (*.txt *.md *.pdf *.docx *.html *.htm *.py *.json *.csv *.log "
            "*.png *.jpg *.jpeg *.webp *.gif);;Pictures (*.png *.jpg *.jpeg *.webp *.gif);;All files (*)")
        self.attach([Path(n) for n in names])

    def _refuse_send(self, text: str, line: str) -> None:
        self.composer.give_back(text)
        self.notice.show_error(line)

    def unfinished(self) -> str | None:
        """What quitting now would interrupt, in words (None: nothing)."""
        return unfinished(self.controller.generating is not None, self.composer.edit.toPlainText())

    def ask_to_quit(self, why: str) -> bool:
        """Ask whether to quit although ``why``; True: quit."""
        box = QMessageBox(QMessageBox.Icon.Question, "Quit Duet", f"Quit Duet? {why}",
                          parent=self)
        box.setObjectName("quit-question")
        quit_button = box.addButton("Quit", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(box.addButton(QMessageBox.StandardButton.Cancel))
        box.exec()
        box.deleteLater()
        return box.clickedButton() is quit_button

    def closeEvent(self, event: QCloseEvent) -> None:
        why = self.unfinished() if self.ask_before_closing else None
        if why is not None and not self.ask_to_quit(why):
            event.ignore()
            return
        self.settings.set("composer_draft", self.composer.edit.toPlainText())  # back at next start
        self.local_server.stop()
        for job in (self.importing, self.exporting, self.dictation, self.projects):
            job.close()  # (cancelled: what an import wrote is kept, an export leaves no half zip)
        self.client.shutdown()
        self.sidebar.searcher.close()
        super().closeEvent(event)
