"""duet-cli: one clear line and a non-zero exit on bad input; --json has the documented keys."""

import json

import pytest

from engine.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["generate", "--model", "/nonexistent/model.gguf", "hi"], "model file not found"),
    (["generate", "--model", "pyproject.toml", "hi"], "not a GGUF model file"),
    (["generate", "--model", "test", "--prompt-file", "/nonexistent.txt"], "cannot read"),
    (["generate", "--model", "test"], "no prompt"),
    (["generate", "--model", "test", "   "], "the prompt is empty"),
    (["generate", "--model", "test", "--top-p", "2", "hi"], "--top-p must be between 0 and 1"),
    (["generate", "--model", "test", "--drafter", "model", "hi"], "needs --draft"),
])
def test_bad_input_is_one_line_and_exit_1(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("duet-cli: error: ") and message in err


def test_generate_json(capsys, smol_path):
    code, out, err = run(capsys, "generate", "--model", str(smol_path), "--temperature", "0",
                         "--max-tokens", "8", "--json", "--drafter", "ngram", "Count to five.")
    assert code == 0
    obj = json.loads(out)
    for key in ("text", "token_ids", "n_prompt_tokens", "n_tokens", "finish_reason", "prompt_s",
                "elapsed_s", "tokens_per_s"):
        assert key in obj
    for key in ("proposed", "accepted", "acceptance_rate", "target_passes", "tokens_per_pass", "drafter"):
        assert key in obj["stats"]
    assert obj["n_tokens"] == len(obj["token_ids"]) and 0 < obj["n_tokens"] <= 8
    assert obj["stats"]["drafter"] == "ngram" and obj["tokens_per_s"] > 0


def test_generate_streams_text(capsys, smol_path):
    code, out, _ = run(capsys, "generate", "--model", str(smol_path), "--temperature", "0",
                       "--max-tokens", "8", "--stop", "\n", "Say hello.")
    assert code == 0 and out.strip() and out.endswith("\n")


def test_every_command_says_its_help(capsys):
    """``duet-cli COMMAND --help`` prints its help for every command (a stray ``%`` in a help
    text once made ``serve --help`` a traceback)."""
    import argparse

    from engine.cli.main import build_parser

    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    assert "serve" in commands
    for name in commands:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0 and "usage: duet-cli" in capsys.readouterr().out, name
