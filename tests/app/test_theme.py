"""The drafted-token tint meets WCAG 2.1 AA in both themes, computed from the theme's colours:
3:1 against the chat's and the code blocks' backgrounds (non-text contrast, SC 1.4.11) and
4.5:1 under the text drawn on it (SC 1.4.3); the dotted underline stays for readers who cannot
tell the colours apart, and is itself 3:1 against the tint."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QPalette, QTextCharFormat
from PySide6.QtWidgets import QApplication

from app.views import theme
from app.views.render import draft_format

NON_TEXT, TEXT = 3.0, 4.5  # WCAG 2.1 AA


def luminance(color: QColor) -> float:
    """WCAG's relative luminance of an opaque sRGB colour."""
    assert color.alpha() == 255, "a see-through tint's contrast depends on what is under it"

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return (0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF())
            + 0.0722 * channel(color.blueF()))


def contrast(a: QColor, b: QColor) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("name", ["light", "dark"])
def test_the_draft_tint_meets_wcag_aa(qapp: QApplication, name: str) -> None:
    theme.apply_theme(qapp, name)
    try:
        colors, palette = theme.colors(), qapp.palette()
        tint = colors.draft_bg
        for background in (palette.color(QPalette.ColorRole.Base), colors.code_bg):
            assert contrast(tint, background) >= NON_TEXT, background.name()
        for text in (palette.color(QPalette.ColorRole.Text), colors.code_fg):
            assert contrast(text, tint) >= TEXT, text.name()
        assert contrast(colors.draft_line, tint) >= NON_TEXT
        fmt = draft_format(colors, QTextCharFormat())
        assert fmt.underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine
        assert fmt.background().color() == tint
    finally:
        theme.apply_theme(qapp, "light")
