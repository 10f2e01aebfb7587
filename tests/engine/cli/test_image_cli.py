"""duet-cli generate --image: the projector found beside the model (or --mmproj), and one line
for a picture or projector that will not do."""

from __future__ import annotations

import json

import pytest

from engine.cli.main import main
from tests.images import picture, write_projector


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def vision_folder(tmp_path_factory, smol_path):
    """A repository's folder: the model and its projector beside it (named as ggml-org does)."""
    folder = tmp_path_factory.mktemp("SmolLM2-vision")
    (folder / smol_path.name).symlink_to(smol_path)
    write_projector(folder / "mmproj-smollm2-135m-instruct-f16.gguf", 576)
    (folder / "photo.png").write_bytes(picture(5))
    return folder


def generate(capsys, model, *more):
    return run(capsys, "generate", "--model", str(model), "--temperature", "0", "--max-tokens", "6",
               "--drafter", "none", "--json", *more, "What is in the picture?")


def test_the_projector_beside_the_model_is_found(capsys, vision_folder, smol_path):
    code, out, err = generate(capsys, vision_folder / smol_path.name, "--image", str(vision_folder / "photo.png"))
    assert code == 0, err
    found = json.loads(out)
    assert found["n_prompt_tokens"] > 16 and found["n_tokens"] > 0
    # the same with --mmproj named: the same reply
    code, out, err = generate(capsys, smol_path, "--image", str(vision_folder / "photo.png"),
                              "--mmproj", str(vision_folder / "mmproj-smollm2-135m-instruct-f16.gguf"))
    assert code == 0, err
    assert json.loads(out)["token_ids"] == found["token_ids"]


def test_one_line_for_what_will_not_do(capsys, vision_folder, smol_path, tmp_path):
    wide = write_projector(tmp_path / "mmproj-wide.gguf", 896)
    cases = [
        (["--image", str(vision_folder / "photo.png")], "cannot read images: no vision projector"),
        (["--image", "pyproject.toml"], "not a PNG, JPEG, WebP or GIF"),
        (["--image", str(smol_path)], "over 20 MiB"),
        (["--image", str(tmp_path / "missing.png")], "cannot read"),
        (["--mmproj", str(wide), "--image", str(vision_folder / "photo.png")], "another width"),
        (["--mmproj", str(smol_path)], "not a projector"),
    ]
    for more, message in cases:
        code, out, err = generate(capsys, smol_path, *more)
        assert code == 1 and out == "" and err.count("\n") == 1 and message in err, (more, err)
