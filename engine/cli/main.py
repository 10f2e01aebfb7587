"""``duet-cli``: the headless front end (generate, models, session, serve, transcribe, worker,
import, export)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine import logsetup
from engine.errors import SIGPIPE, DuetError
from engine.tools import MAX_ROUNDS

if TYPE_CHECKING:
    from engine.events import Token
    from engine.runtime.runtime import RuntimeConfig


def _add_generate(sub: argparse._SubParsersAction) -> None:
    from engine.runtime.runtime import add_runtime_arguments  # lazy: as the subcommands in build_parser

    p = sub.add_parser("generate", help="generate a reply to one prompt")
    add_runtime_arguments(p)
    p.add_argument("--system", help="system message")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--session", type=Path, help="continue a saved conversation (.duet) and save it")
    p.add_argument("--no-session-kv", action="store_true",
                   help="reopen --session from its text only (ignore its saved KV state)")
    p.add_argument("--prompt-file", type=Path, help="read the prompt from a file")
    p.add_argument("--attach", action="append", default=[], type=Path, metavar="FILE",
                   help="a file the prompt is about (text, Markdown, code, PDF, .docx, HTML; "
                        "repeatable): whole when it fits the context, else the passages the "
                        "prompt finds")
    p.add_argument("--image", action="append", default=[], type=Path, metavar="FILE",
                   help="a picture the prompt is about (PNG, JPEG, WebP, GIF; repeatable): the "
                        "model needs its vision projector (--mmproj, or one beside the model)")
    p.add_argument("--attach-mode", choices=("auto", "whole", "retrieved"), default="auto",
                   help="how attached files go into the prompt (default: auto)")
    p.add_argument("prompt", nargs="?", help="the prompt, or - to read standard input")
    _add_tool_arguments(p)
    p.set_defaults(func=_generate)


def _add_tool_arguments(p: argparse.ArgumentParser) -> None:
    """Tools of MCP servers (engine.cli.mcp); the SDK is imported only when they are used."""
    g = p.add_argument_group("tools (MCP)")
    g.add_argument("--mcp-config", type=Path, metavar="FILE",
                   help="the MCP servers whose tools the model may call (mcpServers JSON)")
    g.add_argument("--allow-tool", action="append", default=[], metavar="NAME",
                   help="run calls of this tool (its name, or SERVER/TOOL; repeat for more; "
                        "'*' allows all); calls of other tools are refused")
    g.add_argument("--tool-choice", default="auto", metavar="auto|required|none|NAME",
                   help="whether the first reply must call a tool (required, or the tool NAME)")
    g.add_argument("--max-tool-rounds", type=int, default=MAX_ROUNDS, metavar="N",
                   help="replies that may call tools before the model must answer (default 4)")


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file is not None:
        if args.prompt is not None:
            raise DuetError("give either a prompt or --prompt-file, not both")
        try:
            return args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise DuetError(f"cannot read {args.prompt_file}: {getattr(e, 'strerror', None) or e}") from None
    if args.prompt == "-":
        return sys.stdin.read()
    if args.prompt is None:
        raise DuetError("no prompt: give PROMPT, --prompt-file F or - for standard input")
    return args.prompt


def _generate(args: argparse.Namespace) -> int:
    # lazy: as the subcommands in build_parser (engine.chat.messages: jinja2; engine.runtime.runtime: llama.cpp)
    from engine.chat.messages import Message
    from engine.events import collect, done_json
    from engine.runtime.runtime import Runtime, config_from_args

    prompt = _read_prompt(args)
    if not prompt.strip():
        raise DuetError("the prompt is empty")
    files = _attachments(args.attach, args.attach_mode)  # read first: a bad file loads nothing
    images = _images(args.image)
    config = config_from_args(args)
    if args.session is not None:
        return _generate_in_session(args, config, prompt, files, images)
    with Runtime(config) as rt:
        messages = ([Message("system", args.system)] if args.system else []) + \
            [Message("user", prompt, attachments=files, images=images)]
        if args.mcp_config is not None:
            from engine.cli import mcp as mcp_cli  # lazy: the MCP SDK (~1 s) only with --mcp-config

            return mcp_cli.generate(rt, args, messages, config.sampling)
        done = collect(rt.generator.chat(messages, config.sampling),
                       None if args.json else write_token)
        if args.json:
            out = done_json(done) | rt.exactness.to_json()
            if files:
                out["sources"] = [{"name": x.name, "mode": x.mode, "page": x.page}
                                  for x in rt.generator.last_sources]
            print(json.dumps(out))
        else:
            sys.stdout.write(done.tail + "\n")
    return 0


def _generate_in_session(args: argparse.Namespace, config: RuntimeConfig, prompt: str,
                         files: tuple, images: tuple = ()) -> int:
    """``generate --session``: the message is on disk before the model loads; a model that
    cannot load puts the file back as it was."""
    from engine.conversation.session.resume import continue_session, send, unsend  # lazy (~30 ms)
    from engine.runtime.runtime import Runtime

    if args.mcp_config is not None:
        raise DuetError("--mcp-config cannot be combined with --session yet")
    sent = send(args.session, prompt, system=args.system, model=config.target.path,
                attachments=files, images=images)
    try:
        rt = Runtime(config)
    except DuetError:
        unsend(sent)
        raise
    with rt:
        return continue_session(rt, sent, config.sampling, as_json=args.json,
                                use_kv=not args.no_session_kv)


def _attachments(paths: list[Path], mode: str) -> tuple:
    """The files of --attach, read once (engine.documents); a file that cannot be read is a
    one-line error before anything is loaded."""
    if not paths:
        return ()
    # lazy: the document readers (html, xml, SQLite FTS; ~10-20 ms) only with --attach
    from engine.documents.extract import read_document
    from engine.prompts.attachments import attachment

    return tuple(attachment(read_document(p), mode) for p in paths)


def _images(paths: list[Path]) -> tuple:
    """The pictures of --image, read and checked once (engine.vision.images): a file that is
    not one is a one-line error before anything is loaded."""
    if not paths:
        return ()
    from engine.chat.messages import Image
    from engine.vision.images import MAX_BYTES, ImageError, load

    out = []
    for path in paths:
        try:
            if path.stat().st_size > MAX_BYTES:  # (not read whole to be refused)
                raise ImageError(f"the image is over {MAX_BYTES >> 20} MiB")
            data = path.read_bytes()
            load(data)
        except OSError as e:
            raise DuetError(f"cannot read {path}: {e.strerror}") from None
        except ImageError as e:
            raise DuetError(f"{path}: {e}") from None
        out.append(Image(data, path.name))
    return tuple(out)


def write_token(token: Token) -> None:
    """Stream a token's text to standard output."""
    sys.stdout.write(token.text)
    sys.stdout.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="duet-cli", description="Duet, headless.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    # lazy: the subcommands' modules (llama.cpp through engine.runtime.runtime, huggingface_hub: ~0.5 s)
    # load when the parser is built, so that `import engine.cli.main` stays ~50 ms (-X importtime);
    # every duet-cli command builds the whole parser, so they load at its start either way
    from engine.cli import exporting, importing
    from engine.cli import models as cli_models
    from engine.cli import serve as server_cli
    from engine.cli import session as session_cli
    from engine.cli import transcribe as transcribe_cli
    from engine.llama import rpc_worker as worker

    for module in (cli_models, session_cli, server_cli, transcribe_cli, worker, importing,
                   exporting):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logsetup.configure(logsetup.level_for(args.verbose))
    return run_command("duet-cli", args)


def run_command(prog: str, args: argparse.Namespace) -> int:
    """Run the subcommand ``args.func``: its exit status, or 1 with a one-line error, 130 when
    interrupted, 141 when stdout's reader went away (`duet-cli ... | head`), quietly."""
    try:
        return int(args.func(args) or 0)
    except DuetError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 128 + SIGPIPE
