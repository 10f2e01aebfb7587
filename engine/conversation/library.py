"""The open conversations: which one is shown, which one is being answered, which one the
engine's KV cache holds. No Qt; the sidebar, the chat view and the status bar subscribe.

Listeners get ``(kind, conversation)``: "list" (added, removed, renamed or reordered), "current"
(another conversation is shown), or the conversation's own change kinds ("path", "text",
"meta") for the conversation shown, so a view subscribes once and follows every switch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from engine.conversation.tree import Change, Conversation

Listener = Callable[[str, "Conversation | None"], None]


class Library:
    def __init__(self, conversations: Iterable[Conversation] = ()) -> None:
        self.conversations: list[Conversation] = []
        self.current: Conversation | None = None
        self.generating: str | None = None  # id of the conversation being answered
        self._listeners: list[Listener] = []
        for conv in conversations:
            self.add(conv, first=False, show=False)

    def subscribe(self, callback: Listener) -> None:
        self._listeners.append(callback)

    def _emit(self, kind: str, conv: Conversation | None) -> None:
        for callback in list(self._listeners):
            callback(kind, conv)

    def _relay(self, conv: Conversation, change: Change) -> None:
        if change.kind == "meta" or change.kind == "path" and change.index == 0:
            self._emit("list", conv)  # the title or the emptiness may have changed
        if conv is self.current:
            self._emit(change.kind, conv)

    # -- the list ------------------------------------------------------------------------
    def by_id(self, cid: str | None) -> Conversation | None:
        return next((c for c in self.conversations if c.id == cid), None)

    def listed(self) -> list[Conversation]:
        """What the sidebar lists: every conversation but an empty, unsaved one."""
        return [c for c in self.conversations if not is_blank(c)]

    def add(self, conv: Conversation, *, first: bool = True, show: bool = True) -> Conversation:
        conv.subscribe(self._relay)
        if first:
            self.conversations.insert(0, conv)
        else:
            self.conversations.append(conv)
        self._emit("list", conv)
        if show:
            self.show(conv)
        return conv

    def add_saved(self, convs: Sequence[Conversation],
                  rank: Callable[[Conversation], float] | None = None) -> None:
        """Add saved conversations (not shown): at the end in their order, or among the others
        by ``rank``, most recent first (a file's last change; the list's own order is kept).
        One "list" change for all of them, however many."""
        if rank is None:
            merged = [*self.conversations, *convs]
        else:
            ranks = {id(c): rank(c) for c in [*self.conversations, *convs]}
            new = sorted(convs, key=lambda c: ranks[id(c)], reverse=True)
            merged, i = [], 0
            for conv in self.conversations:
                while i < len(new) and ranks[id(new[i])] > ranks[id(conv)]:
                    merged.append(new[i])
                    i += 1
                merged.append(conv)
            merged += new[i:]
        for conv in convs:
            conv.subscribe(self._relay)
        self.conversations = merged
        self._emit("list", None)

    def remove(self, conv: Conversation) -> None:
        if conv not in self.conversations:
            return
        conv.unsubscribe(self._relay)
        self.conversations.remove(conv)
        if conv is self.current:
            self.current = None
        self._emit("list", conv)

    def show(self, conv: Conversation) -> None:
        """Show ``conv``; a blank conversation left behind is dropped (none piles up)."""
        old = self.current
        self.current = conv
        if old is not None and old is not conv and is_blank(old) and old.id != self.generating:
            self.remove(old)
        self._emit("current", conv)

    def new(self) -> Conversation:
        """Show a new, empty conversation (or the blank one already shown)."""
        if self.current is not None and is_blank(self.current):
            return self.current
        blank = next((c for c in self.conversations if is_blank(c)), None)
        if blank is not None:
            self.show(blank)
            return blank
        return self.add(Conversation())


def is_blank(conv: Conversation) -> bool:
    return conv.loaded and conv.path is None and not conv.turns
