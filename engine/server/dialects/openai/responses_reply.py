"""The Responses API's reply (engine.server.dialects.openai.responses): the response object, and its
typed server-sent events (``response.created`` ... ``response.completed`` or
``response.incomplete``), each with its ``sequence_number``."""

from __future__ import annotations

import json
import time
import uuid

from engine.chat.messages import Message, ToolCall
from engine.events import Token
from engine.server.core import ServedModel
from engine.server.dialects.openai.chat_replies import logprob_entry
from engine.server.dialects.openai.response_store import ResponseStore
from engine.server.dialects.openai.responses_body import ResponsesRequest
from engine.server.errors import ApiError
from engine.server.turn import End, PreparedTurn, Text


# -- the reply ------------------------------------------------------------------------------
class ResponsesShaper:
    """The response object and stream events of one reply, under one response id."""

    media_type = "text/event-stream"

    def __init__(self, server: ServedModel, body: ResponsesRequest, turn: PreparedTurn,
                 store: ResponseStore | None, new: tuple[Message, ...]) -> None:
        self.id = "resp_" + uuid.uuid4().hex
        self.store, self.new = store, new  # where the reply is kept, with the input it answers
        self.created = int(time.time())
        self.model_id = server.model_id
        self.body = body
        self.turn = turn
        self.model = server.model  # token texts for logprobs
        self.output: list[dict] = []  # the items so far
        self.seq = 0
        self.parts: list[str] = []  # the text of the message item being streamed
        self.logprobs: list[dict] = []
        self.pending = ""  # white space that opens no message before a call
        self.thought: list[str] = []  # the text of the reasoning item being streamed

    def response(self, status: str, end: End | None = None) -> dict:
        b = self.body
        fmt = (b.text.format.model_dump(by_alias=True, exclude_none=True)
               if b.text is not None and b.text.format is not None else {"type": "text"})
        choice = (b.tool_choice if isinstance(b.tool_choice, str) or b.tool_choice is None
                  else b.tool_choice.model_dump()) or "auto"
        s = self.turn.sampling
        incomplete = None
        if end is not None and end.finish == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": None, "incomplete_details": incomplete, "instructions": b.instructions,
            "max_output_tokens": s.max_tokens, "model": self.model_id,
            "output": list(self.output), "parallel_tool_calls": b.parallel_tool_calls,
            "previous_response_id": b.previous_response_id,
            "reasoning": {"effort": None, "summary": None}, "store": self.store is not None,
            "temperature": s.temperature, "top_p": s.top_p,
            "text": {"format": fmt}, "tool_choice": choice,
            "tools": [t.model_dump(exclude_none=True) for t in b.tools or ()],
            "truncation": "disabled", "metadata": b.metadata or {},
            "usage": _usage(end) if end is not None else None,
        }

    def whole(self, text: str, calls: list[ToolCall], tokens: list[Token], end: End,
              reasoning: str = "") -> dict:
        if reasoning:
            self.output.append(_reasoning_item(reasoning))
        if text.strip() or tokens or not calls:
            self.output.append(self._message(text, [logprob_entry(self.model, t) for t in tokens]))
        self.output += [_call_item(c) for c in calls]
        self._keep()
        return self.response("completed", end)

    # -- the stream (engine.server.shape.Shaper) ---------------------------------------------
    def event(self, name: str, data: dict) -> bytes:
        payload = json.dumps({"type": name, **data, "sequence_number": self.seq},
                             ensure_ascii=False)
        self.seq += 1
        return f"event: {name}\ndata: {payload}\n\n".encode()

    def start(self) -> list[bytes]:
        head = self.response("in_progress")
        return [self.event("response.created", {"response": head}),
                self.event("response.in_progress", {"response": head})]

    def text(self, piece: Text) -> list[bytes]:
        if piece.thinking:
            return self._think(piece.text)
        entries = [logprob_entry(self.model, t) for t in piece.tokens]
        if not self._open() and not piece.text.strip() and not entries:
            self.pending += piece.text
            return []
        out = self._end_thought() + ([] if self._open() else self._open_message())
        text, self.pending = self.pending + piece.text, ""
        self.parts.append(text)
        self.logprobs += entries
        if not text and not entries:
            return out
        item = self.output[-1]
        return out + [self.event("response.output_text.delta", {
            "item_id": item["id"], "output_index": len(self.output) - 1, "content_index": 0,
            "delta": text, "logprobs": entries})]

    def call(self, call: ToolCall) -> list[bytes]:
        out, self.pending = self._end_thought() + self._close(), ""
        item = _call_item(call)
        index = len(self.output)
        self.output.append(item)
        where = {"item_id": item["id"], "output_index": index}
        return out + [
            self.event("response.output_item.added", {"output_index": index, "item": {
                **item, "arguments": "", "status": "in_progress"}}),
            self.event("response.function_call_arguments.delta", {**where,
                                                                  "delta": call.arguments}),
            self.event("response.function_call_arguments.done", {**where, "name": call.name,
                                                                 "arguments": call.arguments}),
            self.event("response.output_item.done", {"output_index": index, "item": item})]

    def end(self, end: End) -> list[bytes]:
        out = self._end_thought() + self._close()
        if all(o["type"] == "reasoning" for o in self.output):  # no answer: one message, as
            # the whole body has
            out += self._open_message()
            self.parts, self.pending = [self.pending], ""
            out += self._close()
        self._keep()
        body = self.response("completed", end)
        name = "response.completed" if body["status"] == "completed" else "response.incomplete"
        return out + [self.event(name, {"response": body})]

    def failed(self, error: ApiError) -> list[bytes]:
        return [self.event("error", {"code": error.code, "message": error.message,
                                     "param": error.param})]

    def _keep(self) -> None:
        """The reply, kept with the input it answers, for a later ``previous_response_id``."""
        if self.store is None:
            return
        text = "".join(p["text"] for o in self.output if o["type"] == "message"
                       for p in o["content"])
        calls = tuple(ToolCall(o["call_id"], o["name"], o["arguments"]) for o in self.output
                      if o["type"] == "function_call")
        self.store.put(self.id, self.body.previous_response_id,
                       (*self.new, Message("assistant", text, tool_calls=calls)))

    def _think(self, text: str) -> list[bytes]:
        """Reasoning: a reasoning item before the message, its text streamed as it comes."""
        if not text:
            return []
        out = []
        if not self._thinking():
            item = {**_reasoning_item(""), "status": "in_progress", "content": []}
            self.output.append(item)
            self.thought = []
            out.append(self.event("response.output_item.added",
                                  {"output_index": len(self.output) - 1, "item": item}))
        self.thought.append(text)
        return out + [self.event("response.reasoning_text.delta", {
            "item_id": self.output[-1]["id"], "output_index": len(self.output) - 1,
            "content_index": 0, "delta": text})]

    def _thinking(self) -> bool:
        return bool(self.output) and self.output[-1]["type"] == "reasoning" and \
            self.output[-1]["status"] == "in_progress"

    def _end_thought(self) -> list[bytes]:
        if not self._thinking():
            return []
        index = len(self.output) - 1
        text = "".join(self.thought)
        item = self.output[index] = _reasoning_item(text, self.output[index]["id"])
        return [self.event("response.reasoning_text.done", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "text": text}),
                self.event("response.output_item.done", {"output_index": index, "item": item})]

    def _open(self) -> bool:
        return bool(self.output) and self.output[-1]["type"] == "message" and \
            self.output[-1]["status"] == "in_progress"

    def _open_message(self) -> list[bytes]:
        item = {**self._message("", []), "status": "in_progress", "content": []}
        self.output.append(item)
        self.parts, self.logprobs = [], []
        index = len(self.output) - 1
        return [self.event("response.output_item.added", {"output_index": index, "item": item}),
                self.event("response.content_part.added", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "part": _part("", [])})]

    def _close(self) -> list[bytes]:
        if not self._open():
            return []
        index = len(self.output) - 1
        text = "".join(self.parts)
        item = self.output[index] = self._message(text, self.logprobs, self.output[index]["id"])
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [self.event("response.output_text.done", {**where, "text": text,
                                                         "logprobs": self.logprobs}),
                self.event("response.content_part.done", {**where,
                                                          "part": item["content"][0]}),
                self.event("response.output_item.done", {"output_index": index, "item": item})]

    @staticmethod
    def _message(text: str, logprobs: list[dict], item_id: str | None = None) -> dict:
        return {"type": "message", "id": item_id or "msg_" + uuid.uuid4().hex,
                "status": "completed", "role": "assistant", "content": [_part(text, logprobs)]}


def _reasoning_item(text: str, item_id: str | None = None) -> dict:
    """A reasoning model's thinking, whole (as its content; no summary is made)."""
    return {"type": "reasoning", "id": item_id or "rs_" + uuid.uuid4().hex, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}], "status": "completed"}


def _part(text: str, logprobs: list[dict]) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def _call_item(call: ToolCall) -> dict:
    return {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"),
            "call_id": call.id, "name": call.name, "arguments": call.arguments,
            "status": "completed"}


def _usage(end: End) -> dict:
    s = end.done.stats
    return {"input_tokens": s.n_prompt_tokens, "output_tokens": s.n_completion,
            "total_tokens": s.n_prompt_tokens + s.n_completion,
            "input_tokens_details": {"cached_tokens": s.n_cached_tokens, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}
