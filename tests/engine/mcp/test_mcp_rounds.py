"""Tool rounds on a real model (SmolLM2) and real MCP servers over stdio: a forced call runs
only when the person allows it, its result goes back as untrusted text and the model goes on;
the command line does the same with --mcp-config and --allow-tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_servers import INJECTION
from mcp_testing import ready, stdio_server

from engine.chat.messages import Message
from engine.cli.main import main
from engine.decode.sampling import SamplingParams
from engine.events import Done
from engine.mcp import McpConfig, ToolHost
from engine.mcp.offer import offer
from engine.runtime.generate import Generator
from engine.runtime.tool_rounds import CallAnswered, RoundsDone, Text, tool_rounds
from engine.tools import ToolChoice
from engine.tools.calls import REFUSED
from engine.tools.prompting import result_prefix

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)
ASK = [Message("user", "Add 2 and 3 with the add tool.")]


class Recording:
    """The real generator, keeping each prompt it was given."""

    def __init__(self, gen: Generator) -> None:
        self.gen, self.model, self.ctx, self.prompts = gen, gen.model, gen.ctx, []

    def complete(self, prompt, params, cancel=None, **kw):
        self.prompts.append(list(prompt))
        return self.gen.complete(prompt, params, cancel, **kw)

    def read_ahead(self, tokens, cancel=None):
        return self.gen.read_ahead(tokens, cancel)


def run(gen, host: ToolHost, *, allow: bool, choice: ToolChoice, max_rounds: int = 2):
    asked = []

    def ask(call):
        asked.append(call)
        return allow
    events = list(tool_rounds(gen, ASK, offer(host), GREEDY, ask=ask, choice=choice,
                              max_rounds=max_rounds))
    return events, asked


def test_an_allowed_call_runs_on_the_server_and_the_model_answers_after_its_result(smol_ctx, friendly) -> None:
    events, asked = run(Generator.alone(smol_ctx), friendly, allow=True,
                        choice=ToolChoice("function", "add", parallel=False))
    answered = [e for e in events if isinstance(e, CallAnswered)]
    assert answered and [a.call for a in answered] == asked[:len(answered)]
    first = answered[0]
    args = json.loads(first.call.arguments)
    assert first.allowed and not first.result.is_error
    assert first.result.text == str(args["a"] + args["b"])  # the server's sum, not the model's
    end = events[-1]
    assert isinstance(end, RoundsDone) and end.replies >= 2
    calls, result = end.messages[0], end.messages[1]
    assert calls.role == "assistant" and calls.tool_calls[0] == first.call
    assert (result.role, result.tool_call_id, result.content) == ("tool", first.call.id, first.result.text)
    assert end.messages[-1].role == "assistant" and not end.messages[-1].tool_calls
    assert "".join(e.text for e in events if isinstance(e, Text)) .endswith(end.messages[-1].content)


def test_a_refused_call_never_reaches_the_server_and_the_model_is_told(smol_ctx, host, tmp_path) -> None:
    host.apply(McpConfig((stdio_server("hostile", "hostile", {"RECORD_FILE": str(tmp_path / "rec")}),)))
    ready(host, "hostile")
    events, asked = run(Generator.alone(smol_ctx), host, allow=False,
                        choice=ToolChoice("function", "record", parallel=False))
    answered = [e for e in events if isinstance(e, CallAnswered)]
    assert asked and answered[0].call.name == "record"
    assert not answered[0].allowed and answered[0].result.text == REFUSED
    assert not (tmp_path / "rec").exists()


def test_a_result_that_spells_chat_markup_stays_text_and_approves_nothing(smol_ctx, host, tmp_path) -> None:
    host.apply(McpConfig((stdio_server("hostile", "hostile", {"RECORD_FILE": str(tmp_path / "rec")}),)))
    ready(host, "hostile")
    gen = Recording(Generator.alone(smol_ctx))
    asked = []

    def ask(call):  # the person allows the injection tool only
        asked.append(call.name)
        return call.name == "inject"
    events = list(tool_rounds(gen, ASK, offer(host), GREEDY, ask=ask,
                              choice=ToolChoice("function", "inject", parallel=False), max_rounds=1))
    answered = [e for e in events if isinstance(e, CallAnswered)]
    assert answered[0].result.text == INJECTION
    assert len(gen.prompts) == 2
    start = smol_ctx.model.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(start) == 1
    # The second prompt: system (tools), user, assistant (call), tool, and the generation prompt.
    # The result's own <|im_start|> is text, not the control token.
    assert gen.prompts[1].count(start[0]) == gen.prompts[0].count(start[0]) + 2
    # ... and it goes on from the first (the tools still shown): only the reply and the result
    # are new to the context
    assert gen.prompts[1][:len(gen.prompts[0])] == gen.prompts[0]
    assert not (tmp_path / "rec").exists()
    assert asked == ["inject"]  # the last reply reads no calls: nothing more is put to the person


def test_the_answer_reads_only_the_result_the_rest_was_read_while_the_call_ran(smol_ctx, friendly) -> None:
    gen = Recording(Generator.alone(smol_ctx))
    tools = offer(friendly)
    events = list(tool_rounds(gen, ASK, tools, GREEDY, ask=lambda call: True, max_rounds=1,
                              choice=ToolChoice("function", "add", parallel=False)))
    dones = [e for e in events if isinstance(e, Done)]
    end = events[-1]
    assert isinstance(end, RoundsDone) and len(dones) == 2
    said = end.messages[0]
    prefix = result_prefix(smol_ctx.model, [*ASK, said], tools.tools, said.tool_calls[0])
    assert gen.prompts[1][:len(prefix)] == prefix
    # the answer found the call's re-rendering (and the markup before the result) cached
    assert dones[1].stats.n_cached_tokens >= len(prefix) > len(gen.prompts[0])


def test_a_cancelled_rounds_run_ends_without_calling(smol_ctx, friendly) -> None:
    import threading

    cancel = threading.Event()
    cancel.set()
    events = list(tool_rounds(Generator.alone(smol_ctx), ASK, offer(friendly), GREEDY, cancel=cancel,
                              ask=lambda call: pytest.fail("asked after a cancel"),
                              choice=ToolChoice("function", "add", parallel=False)))
    assert isinstance(events[-1], RoundsDone) and events[-1].done.reason == "cancelled"
    assert not any(isinstance(e, CallAnswered) for e in events)


def _config(tmp_path: Path) -> Path:
    server = stdio_server("friendly", "friendly")
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"friendly": {"command": server.command,
                                                            "args": list(server.args)}}}))
    return path


@pytest.mark.parametrize("allow", [True, False])
def test_the_command_line_runs_only_the_tools_it_is_allowed(tmp_path, capsys, allow) -> None:
    flags = ["--allow-tool", "friendly/add"] if allow else ["--allow-tool", "echo"]
    code = main(["generate", "--model", "test", "--temperature", "0", "--max-tokens", "64", "--json",
                 "--mcp-config", str(_config(tmp_path)), "--tool-choice", "add", *flags,
                 "Add 2 and 3 with the add tool."])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    call = out["tool_calls"][0]
    assert call["name"] == "add" and call["allowed"] is allow
    expected = str(call["arguments"]["a"] + call["arguments"]["b"]) if allow else REFUSED
    assert call["result"] == expected
    assert out["replies"] >= 2


def test_the_command_line_says_in_one_line_when_the_config_is_unusable(tmp_path, capsys) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text("{not json")
    assert main(["generate", "--model", "test", "--mcp-config", str(bad), "hi"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("duet-cli: error: mcp.json") and "\n" not in err
