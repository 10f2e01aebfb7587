"""Themes: the system look, or Fusion with a light or dark QPalette; and the message colours.

The drafted-token tint meets WCAG 2.1 AA in both themes: 3:1 against the chat's and the code
blocks' backgrounds (non-text contrast, 1.4.11), 4.5:1 under the text drawn on it (1.4.3); its
dotted underline stays, for readers who cannot tell the colours apart (tests/app/test_theme.py
computes the ratios from these colours).
"""

from __future__ import annotations

import logging

from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

from app.views.render import Colors

log = logging.getLogger(__name__)

_system: tuple[str, QPalette] | None = None  # the style and palette the app started with

LIGHT_COLORS = Colors(
    code_bg=QColor("#f6f8fa"), code_border=QColor("#d0d7de"), code_fg=QColor("#1f2328"),
    keyword=QColor("#cf222e"), string=QColor("#0a3069"), comment=QColor("#6e7781"),
    number=QColor("#0550ae"), draft_bg=QColor("#bb8400"), muted=QColor("#6e7781"),
    link=QColor("#0969da"), draft_line=QColor("#3d2b00"))
DARK_COLORS = Colors(
    code_bg=QColor("#161b22"), code_border=QColor("#30363d"), code_fg=QColor("#e6edf3"),
    keyword=QColor("#ff7b72"), string=QColor("#a5d6ff"), comment=QColor("#8b949e"),
    number=QColor("#79c0ff"), draft_bg=QColor("#87620a"), muted=QColor("#8b949e"),
    link=QColor("#58a6ff"), draft_line=QColor("#ffe29a"))


def _palette(dark: bool) -> QPalette:
    p = QPalette()
    R = QPalette.ColorRole
    if dark:
        roles = {R.Window: "#202124", R.WindowText: "#e8eaed", R.Base: "#17181a",
                 R.AlternateBase: "#26282b", R.ToolTipBase: "#2d2f31", R.ToolTipText: "#e8eaed",
                 R.Text: "#e8eaed", R.Button: "#2d2f31", R.ButtonText: "#e8eaed",
                 R.BrightText: "#ff6b6b", R.Highlight: "#3d6cc0", R.HighlightedText: "#ffffff",
                 R.Link: "#8ab4f8", R.PlaceholderText: "#8f9499", R.Mid: "#3c4043",
                 R.Dark: "#111214", R.Light: "#3c4043", R.Midlight: "#34373a", R.Shadow: "#000000"}
        disabled = "#6f7378"
    else:
        roles = {R.Window: "#f3f4f6", R.WindowText: "#1f2328", R.Base: "#ffffff",
                 R.AlternateBase: "#f6f8fa", R.ToolTipBase: "#ffffff", R.ToolTipText: "#1f2328",
                 R.Text: "#1f2328", R.Button: "#f6f8fa", R.ButtonText: "#1f2328",
                 R.BrightText: "#d1242f", R.Highlight: "#0969da", R.HighlightedText: "#ffffff",
                 R.Link: "#0969da", R.PlaceholderText: "#8c959f", R.Mid: "#d0d7de",
                 R.Dark: "#afb8c1", R.Light: "#ffffff", R.Midlight: "#eaeef2", R.Shadow: "#8c959f"}
        disabled = "#8c959f"
    for role, color in roles.items():
        p.setColor(role, QColor(color))
    for role in (R.WindowText, R.Text, R.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(disabled))
    return p


def apply_theme(app: QApplication, theme: str) -> None:
    """``theme``: "system" (the look the app started with), "light" or "dark" (Fusion)."""
    global _system
    if _system is None:
        _system = (app.style().name(), QPalette(app.palette()))
    if theme == "system":
        style, palette = _system
        if app.style().name() != style:
            app.setStyle(QStyleFactory.create(style))
        app.setPalette(palette)
    elif theme in ("light", "dark"):
        if app.style().name().lower() != "fusion":
            app.setStyle(QStyleFactory.create("Fusion"))
        app.setPalette(_palette(theme == "dark"))
    else:
        log.warning("unknown theme %r", theme)
        return
    log.debug("theme %s applied", theme)


def is_dark() -> bool:
    app = QGuiApplication.instance()
    return isinstance(app, QGuiApplication) and app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def colors() -> Colors:
    return DARK_COLORS if is_dark() else LIGHT_COLORS
