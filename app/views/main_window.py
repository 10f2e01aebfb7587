"""The main window: conversations on the left; models bar, notices, chat and composer on the right.

It assembles the widgets, the menus and the engine client, loads models (off the GUI thread,
through the worker), fetches the starter models on first run, and applies settings changes:
theme and highlighting at once, model-load options at the next load (it says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QIcon, QKeySequence
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

from app.control import model_memory
from app.control.controller import ChatController
from app.control.conversation import SUFFIX, Conversation, RecentFiles
from app.control.settings import OPTIONS, Settings
from app.control.state import AppState
from app.engine_link.client import EngineClient
from app.engine_link.local_server import LocalServer
from app.engine_link.messages import Failure, Fetched, LoadedModel, Progress
from app.views import file_dialogs, theme
from app.views.attachments import Attachments, ChipBar
from app.views.chat_view import ChatView
from app.views.composer import Composer
from app.views.models_panel import FirstRunPanel, ModelsPanel, gguf_paths, installed_models, starter_pair
from app.views.notice import NoticeBar
from app.views.presets import PresetBar
from app.views.settings_dialog import SettingsDialog
from app.views.sidebar import Sidebar
from app.views.status import StatusBar
from app.views.tools_panel import Tools, open_tools_dialog, tools_for
from engine.errors import DuetError
from engine.llama.model import check_gguf_file
from engine.mcp import config as mcp_config

log = logging.getLogger(__name__)

ICON = Path(__file__).resolve().parent.parent / "resources" / "icons" / "duet.svg"




class MainWindow(QMainWindow):
    model_loaded = Signal(object)  # LoadedModel, once the window has shown it
    model_failed = Signal(object)  # Failure of a load or a fetch
    ask_before_closing = True  # False: the process is asked to end (a signal); it just does
    notice: NoticeBar  # (made by _build)
    chat_view: ChatView
    composer: Composer
    status: StatusBar

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
        self._connect_controller()
        self._build_menus()
        w = self.client.worker
        w.loaded.connect(self.on_loaded)
        w.progress.connect(self.on_progress)
        w.fetched.connect(self.on_fetched)
        w.failed.connect(self.on_failed)
        self.settings.changed.connect(self.on_setting_changed)
        self.chat_view.set_highlight_draft(self.settings["highlight_draft"])
        self.local_server = LocalServer(self)
        # Methods, not lambdas: PySide queues a method of a QObject to its thread (the signals
        # come from the server's start-up thread) but would run a lambda on the emitting one.
        self.local_server.started.connect(self.status.set_server)
        self.local_server.stopped.connect(self.status.clear_server)
        self.local_server.failed.connect(self.notice.show_error)
        self.controller.start()
        if any(server.enabled for server in mcp_config.load().servers):
            tools_for(self)  # the person's MCP servers start with the window
        self._choose_initial_models(autoload)
        self.resize(1100, 760)

    # -- layout ----------------------------------------------------------------------------
    def _build(self) -> None:
        self.sidebar = Sidebar(self)
        self.sidebar.open_requested.connect(lambda: file_dialogs.open_conversation(self))
        self.sidebar.rename_requested.connect(lambda cid: file_dialogs.rename(self, cid))
        self.models = ModelsPanel(self)
        self.models.load_requested.connect(self.load_models)
        self.models.cancel_requested.connect(lambda: self.client.cancel("load"))
        self.notice = NoticeBar(self)
        self.chat_view = ChatView(self)
        self.composer = Composer(self)
        # files attached to the next message (counted in the loaded model's tokens)
        self.attachments = Attachments(self._token_counter, self)
        self.chips = ChipBar(self.attachments, self)
        self.presets = PresetBar(self)
        self.first_run = FirstRunPanel(self)
        self.first_run.use_requested.connect(self.use_starters)
        self.first_run.fetch_requested.connect(self.fetch_starters)
        self.first_run.open_requested.connect(self._first_run_open)
        self.first_run.cancel_requested.connect(lambda: self.client.cancel("fetch"))
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

    def _connect_controller(self) -> None:
        """The views follow the conversation model; their requests go to the controller."""
        c, library = self.controller, self.controller.library
        for view in (self.chat_view, self.sidebar, self.status, self.notice, self.presets):
            view.follow(library)
        self.presets.chosen.connect(c.apply_preset)
        self.composer.send_requested.connect(self._send)
        self.composer.stop_requested.connect(c.stop)
        self.composer.attach_requested.connect(self._choose_attachments)
        self.composer.files_given.connect(self.attach)
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
        c.notice.connect(self.notice.show_message)
        c.message.connect(self.status.showMessage)
        c.draft_returned.connect(self.composer.give_back)
        c.current_changed.connect(self._update_title)
        c.model_suggested.connect(self._suggest_model)

    def _build_menus(self) -> None:
        c = self.controller
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self._action(file, "&New conversation", c.new, QKeySequence.StandardKey.New)
        self._action(file, "&Open…", lambda: file_dialogs.open_conversation(self),
                     QKeySequence.StandardKey.Open)
        self.recent_menu = file.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(lambda: file_dialogs.fill_recent(self))
        self._action(file, "&Save", lambda: c.files.save(), QKeySequence.StandardKey.Save)
        self._action(file, "Save &as…", lambda: file_dialogs.save_as(self),
                     QKeySequence.StandardKey.SaveAs)
        file.addSeparator()
        self._action(file, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        conv = bar.addMenu("&Conversation")
        self._action(conv, "&Rename…", lambda: file_dialogs.rename(self, c.current.id if c.current else None),
                     QKeySequence("F2"))
        self._action(conv, "&Delete", lambda: file_dialogs.delete(self))
        self._action(conv, "&Export the branch shown…", lambda: file_dialogs.export_shown(self))
        self._action(conv, "&Find…", self.sidebar.search.setFocus, QKeySequence.StandardKey.Find)
        self._action(conv, "S&top the reply or tool call", c.stop, QKeySequence("Esc"))
        model = bar.addMenu("&Model")
        self._action(model, "Choose &target model…", lambda: self._browse_model(False))
        self._action(model, "Choose &draft model…", lambda: self._browse_model(True))
        self._action(model, "&Load / reload", self.reload, QKeySequence("Ctrl+R"))
        self._action(model, "&Fetch the starter models…", self.fetch_starters)
        settings = bar.addMenu("&Settings")
        self._action(settings, "&Preferences…", self.settings_dialog, QKeySequence("Ctrl+,"))
        self._action(settings, "&Tools (MCP servers)…", lambda: open_tools_dialog(self))
        self._action(settings, "&Measure the verification cost again", self.recalibrate)
        help_ = bar.addMenu("&Help")
        self._action(help_, "&About Duet", self._about)

    def _action(self, menu: QMenu, text: str, slot: Callable[[], object],
                shortcut: QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
        action = menu.addAction(text)
        action.triggered.connect(lambda _checked=False: slot())
        if shortcut is not None:
            action.setShortcut(shortcut)
        return action

    def _update_title(self, conv: Conversation | None) -> None:
        self.setWindowTitle(f"{conv.title} — Duet" if conv is not None else "Duet")

    # -- models ----------------------------------------------------------------------------
    def _choose_initial_models(self, autoload: bool) -> None:
        """The model chosen last loads at once. Nobody has chosen yet: nothing loads; the
        first-run panel offers the starter models (one button) or their fetch, and other
        installed models wait in the models bar for Load."""
        s = self.settings
        target = Path(s["target_model"]) if s["target_model"] else None
        if target is not None and target.exists():
            draft = Path(s["draft_model"]) if s["draft_model"] else None
            self.models.populate(target, draft)
            if autoload:
                self.load_models(target, draft)
            return
        starters, installed = starter_pair(), installed_models()
        self.models.populate(*(starters or (installed[-1] if installed else None, None)))
        self.first_run.offer_starters(starters is not None)
        if starters is not None or not installed:
            self.stack.setCurrentWidget(self.first_run)

    def use_starters(self) -> None:
        starters = starter_pair()
        if starters is None:  # gone since the window opened
            self.first_run.offer_starters(False)
            return
        self.load_models(*starters)

    def load_models(self, target: Path, draft: Path | None = None) -> None:
        try:
            for path in (target, draft):
                if path is not None:
                    check_gguf_file(Path(path))
            if str(target) != self.settings["target_model"]:  # another model: its own settings
                remembered = model_memory.recall(Path(target))
                remembered_draft = remembered.pop("draft_model", None)
                if draft is None and remembered_draft:
                    draft = Path(remembered_draft)
                with self.state.recalling_settings():  # they belong to the new model, not the old
                    self.settings.update(remembered)
            config = self.settings.runtime_config(target, draft)
        except (DuetError, ValueError) as e:
            self._refuse_model(target, draft, f"Could not load the model: {e}")
            return
        self.settings.update({"target_model": str(target), "draft_model": str(draft or "")})
        model_memory.remember(Path(target), self.settings.values)
        self.models.populate(target, draft)
        self.stack.setCurrentWidget(self.chat_view)
        self.state.load_started()
        self.models.set_loading(True, f"Loading {target.name}…")
        self.client.load(config)

    def _refuse_model(self, target: Path, draft: Path | None, message: str) -> None:
        """A choice that cannot load: say why, keep what is loaded, drop bad files from the
        pickers."""
        for path in (target, draft):
            if path is not None:
                try:
                    check_gguf_file(Path(path))
                except DuetError:
                    self.models.forget(Path(path))
        info = self.state.model
        if info is not None:
            self.models.populate(info.target_path, info.draft_path)
            self.models.show_loaded(info, self.client.worker.worker_lost)
        else:
            self.models.populate()
        self.notice.show_message(message + (f" (still using {info.target_name})" if info else ""),
                                 "error", until_load=True)

    def recalibrate(self) -> None:
        """Forget every measured verify-cost curve and reload: the loaded model is measured
        again after the load, between replies (on a quiet machine, for figures that hold)."""
        # lazy: the speculative modules (statistics; ~5 ms) load with the first model that
        # drafts (engine.runtime.runtime), not before the window shows
        from engine.decode.speculative import calibration

        calibration.forget(None)
        if self.state.model is not None and not self.state.loading:
            self.reload()

    def reload(self) -> None:
        target = self.models.target()
        if target is not None:
            self.load_models(target, self.models.draft())

    def on_loaded(self, info: LoadedModel) -> None:
        self.state.loaded(info)
        self.status.clearMessage()  # "Loading…": done
        if info.measuring:  # the status bar says how far, until the measurement ends
            self.status.set_measuring(0, 0)
        else:
            self.status.clear_measuring()
        self.models.show_loaded(info, self.client.worker.worker_lost)
        self.status.set_drafter(info.drafter)
        self.status.set_context(0, info.n_ctx)
        if info.draft_problem:
            self.notice.show_message(f"The draft model was not used: {info.draft_problem}. "
                                     f"Drafting with: {info.drafter}.", "info")
        elif self.notice.kind == "info" or self.notice.until_load:
            self.notice.hide()
        if self.settings["server_enabled"]:
            self.local_server.apply(self.settings.values, self.client.worker.engine)  # the new one
        self.model_loaded.emit(info)

    def on_progress(self, p: Progress) -> None:
        if p.op == "fetch":
            self.first_run.show_progress(p.done, p.total, p.text)
        elif p.op == "prompt" and p.total:
            self.status.showMessage(f"Reading the prompt: {p.done} / {p.total} tokens", 2000)
        elif p.op == "calibrate":  # after a load, between replies: the status bar says how far
            if p.done < p.total:
                self.status.set_measuring(p.done, p.total)
            else:
                self.status.clear_measuring()
                self.status.showMessage(p.text, 8000)
        elif p.text:
            self.status.showMessage(p.text, 3000)

    def on_failed(self, failure: Failure) -> None:
        if failure.op == "load":
            self.state.load_failed()
            self.models.show_failed(failure.message)
            self.status.clearMessage()
            self.status.clear_stats()
            self.status.clear_measuring()
            if failure.cancelled:
                self.notice.show_message("Loading was cancelled: choose a model and press Load.",
                                         "info", until_load=True)
            else:
                self.notice.show_message(f"Could not load the model: {failure.message}", "error",
                                         until_load=True)
        elif failure.op == "fetch":
            self.first_run.set_fetching(False)
            self.notice.show_message(f"Fetching the starter models stopped: {failure.message}",
                                     "error")
        else:
            return
        self.model_failed.emit(failure)

    def fetch_starters(self) -> None:
        self.stack.setCurrentWidget(self.first_run)
        self.first_run.set_fetching(True)
        self.client.fetch(("target", "draft"))

    def on_fetched(self, fetched: Fetched) -> None:
        self.first_run.set_fetching(False)
        target, *rest = fetched.paths
        self.load_models(target, rest[0] if rest else None)

    def _first_run_open(self) -> None:
        path = self.models.browse()
        if path is not None:
            self.load_models(path, None)

    def _browse_model(self, as_draft: bool) -> None:
        path = self.models.browse(as_draft)
        if path is not None:
            self.models.set_choice(path, as_draft=as_draft)

    def _suggest_model(self, path: Path) -> None:
        if Path(path).exists() and not self.state.loading:
            self.notice.show_message(f"This conversation was made with {Path(path).name}.",
                                     "info", "Load it", lambda: self.load_models(Path(path)))

    # -- settings --------------------------------------------------------------------------
    def on_setting_changed(self, name: str) -> None:
        value = self.settings[name]
        option = OPTIONS[name]
        if name == "theme":
            theme.apply_theme(cast(QApplication, QApplication.instance()), value)
            self.chat_view.restyle()
        elif name == "highlight_draft":
            self.chat_view.set_highlight_draft(value)
        if name in model_memory.REMEMBERED and self.settings["target_model"] and not self.state.recalling:
            model_memory.remember(Path(self.settings["target_model"]), self.settings.values)
        if name.startswith("server_"):
            self.local_server.apply(self.settings.values, self.client.worker.engine)  # off the GUI thread
        elif option.applies == "reload" and option.visible and self.state.wait_for_reload(name):
            labels = ", ".join(OPTIONS[n].label for n in sorted(self.state.pending_reload))
            self.notice.show_message(f"{labels}: applies at the next model load.", "info",
                                     "Reload now", self.reload, until_load=True)

    def settings_dialog(self) -> SettingsDialog:
        dialog = SettingsDialog(self.settings, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def _about(self) -> None:
        QMessageBox.about(self, "About Duet", "Duet: a desktop chat for local GGUF models, with "
                          "speculative decoding and conversations that reopen instantly.")

    # -- window events ---------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        """A conversation opens, a model loads, any other file is attached to the message."""
        urls = event.mimeData().urls()
        models = gguf_paths(urls)
        for url in urls:
            if not url.isLocalFile():
                continue
            path = Path(url.toLocalFile())
            if path.suffix == SUFFIX:
                self.controller.files.open_path(path)
            elif not any(path == m for m in models):
                self.attach([path])
        if models:
            self.models.handle_drop(models[0])
        event.acceptProposedAction()

    # -- attached files --------------------------------------------------------------------
    def attach(self, paths: list[Path]) -> None:
        for path in paths:
            self.attachments.add(Path(path))

    def _choose_attachments(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(
            self, "Attach files", str(Path.home()),
            "Documents (*.txt *.md *.pdf *.docx *.html *.htm *.py *.json *.csv *.log);;All files (*)")
        self.attach([Path(n) for n in names])

    def _send(self, text: str) -> None:
        if self.attachments.pending:
            self.composer.give_back(text)
            self.notice.show_error("A file is still being read: send again in a moment.")
            return
        self.controller.send(text, self.attachments.take_all())

    def _token_counter(self) -> Callable[[str], int] | None:
        """Counts a text's tokens on the engine's thread (which owns the model: a reload
        cannot free it under the count)."""
        engine = self.client.worker.engine
        if engine is None:
            return None

        def count(text: str) -> int:
            return int(engine.call(lambda: len(engine.runtime.target.tokenize_text(text))).result())

        return count

    def unfinished(self) -> str | None:
        """What quitting now would interrupt, in words (None: nothing)."""
        why = []
        if self.controller.generating is not None:
            why.append("A reply is being written: it stops here.")
        if self.composer.edit.toPlainText().strip():
            why.append("Your unsent message is kept: it is in the composer at the next start.")
        return " ".join(why) or None

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
        self.client.shutdown()
        self.sidebar.searcher.close()
        super().closeEvent(event)
