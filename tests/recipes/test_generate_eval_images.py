"""The generate and eval recipes with images, on a tiny random SmolVLM (Idefics3) folder written by
transformers and Pillow-drawn discs: generate prints what the library generates with the same
prompt and pixels; eval scores an image QA file (chats with image parts) by exact match; a text
model, a missing or unreadable image and an image folder read as text only are refused before the
model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_recipe
from PIL import Image
from test_llama3_2_vision_recipe import TILE as MLLAMA_TILE
from test_vlm_recipes import TRANSFORM, _data, _folder
from tiny_vlm_folders import llama3_2_vision as tiny_mllama_folder

from ftune.checkpointing import load_hf
from ftune.config import ConfigError, load_config
from ftune.config.image_checks import ImageReadError
from ftune.data import Idefics3ImageTransform, MllamaImageTransform
from ftune.datasets.image_generation import family_image_transform, image_chat_prompt
from ftune.generation import generate
from ftune.tokenizers import HFTokenizer

pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "What colour is the disc?"
TRANSFORM_KEYS = [f"image_transform.{k}={v}" for k, v in TRANSFORM.items()]


@pytest.fixture(scope="module")
def vlm(tmp_path_factory) -> tuple[Path, Path]:
    """(the tiny SmolVLM folder, the folder of the drawn discs and their chats)."""
    path = tmp_path_factory.mktemp("vlm")
    folder, _ = _folder(path, fit_vocab=True)
    _data(path)
    return folder, path


def _generate_cfg(folder: Path, *overrides: str):
    return load_config(
        "smolvlm/256M_generation",
        [
            f"tokenizer.path={folder}",
            f"checkpointer.checkpoint_dir={folder}",
            f"prompt={PROMPT!r}",
            "max_new_tokens=8",
            *overrides,
        ],
    )


def test_generate_with_an_image_prints_what_the_library_generates(vlm, capsys) -> None:
    folder, data = vlm
    image = str(data / "red.png")
    cfg = _generate_cfg(
        folder,
        f"images=[{image}]",
        "~image_transform",
        "image_transform._component_=ftune.data.Idefics3ImageTransform",
        *TRANSFORM_KEYS,
    )
    load_recipe("generate").main(cfg)
    out = capsys.readouterr().out
    tokenizer = HFTokenizer(folder)
    inputs = image_chat_prompt(
        tokenizer, Idefics3ImageTransform(**TRANSFORM), text=PROMPT, images=[Image.open(image)]
    )
    model = load_hf(folder, image_text=True).eval()
    expected = generate(
        model,
        inputs.tokens[0],
        max_new_tokens=8,
        stop_tokens=tokenizer.stop_tokens,
        pixel_values=inputs.pixel_values,
    )
    assert out == tokenizer.decode(expected) + "\n"
    image_tokens = inputs.tokens[0].count(tokenizer.token_to_id("<image>"))
    assert image_tokens == 20  # 2 x 2 tiles and the global image, 4 tokens each


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["images=[missing.png]"], r"images\[0\]: image file '.*missing.png' does not exist; fix the path"),
        (["images=[{bad}]"], r"images\[0\]: image file '.*bad.png' cannot be decoded as an image"),
        (
            ["images=[{red}]", "checkpointer.image_text=false"],
            r"images: images were given, but checkpointer.image_text is false, .* set checkpointer.image_text=true",
        ),
        (["images=[{red}]", "chat=false"], r"images: 1 image\(s\) given with chat=false"),
        (  # what torchtune's llama3_2_vision/11B_generation_v2 converts to: its image is a URL
            ["images=[https://example.com/a.jpg]"],
            r"images\[0\] is a URL \('https://example.com/a.jpg'\); ftune reads images from local files only: download it",
        ),
    ],
    ids=["missing", "unreadable", "read-as-text", "raw-text", "url"],
)
def test_generate_refuses_bad_images_before_the_model_loads(
    vlm, tmp_path, monkeypatch, overrides, match
) -> None:
    folder, data = vlm
    (tmp_path / "bad.png").write_bytes(b"not a png")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("ftune.checkpointing.load_inference_model", _no_load)
    overrides = [o.format(bad=tmp_path / "bad.png", red=data / "red.png") for o in overrides]
    with pytest.raises((ValueError, ImageReadError, ConfigError), match=match):
        load_recipe("generate").main(_generate_cfg(folder, *overrides))


def test_generate_refuses_images_for_a_text_model(vlm, tmp_path, monkeypatch) -> None:
    folder, data = vlm
    text = tmp_path / "text_model"
    text.mkdir()
    (text / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setattr("ftune.checkpointing.load_inference_model", _no_load)
    cfg = _generate_cfg(folder, f"images=[{data / 'red.png'}]", f"checkpointer.checkpoint_dir={text}")
    with pytest.raises(ValueError, match=r"describes a text-only model \(model_type 'llama'\); images need"):
        load_recipe("generate").main(cfg)


def _no_load(*args, **kwargs):
    raise AssertionError("the model loaded before the images were checked")


def test_generate_llama3_2_vision_with_an_image_equals_the_library(vlm, tmp_path) -> None:
    # The cross-attention family: its tiles, aspect ratios and cross-attention mask reach the KV-cache
    # generation through the recipe; the family's transform is config.json's (tile_size set to the tiny one).
    _, data = vlm
    folder, _ = tiny_mllama_folder(tmp_path)
    image = str(data / "red.png")
    cfg = _generate_cfg(
        folder,
        f"images=[{image}]",
        "~image_transform",
        "image_transform._component_=ftune.data.MllamaImageTransform",
        f"image_transform.tile_size={MLLAMA_TILE}",
    )
    recipe, got = load_recipe("generate"), []

    def recorded(*args, on_token, **kwargs):  # the tiny model's vocabulary outgrows the tokenizer's:
        # compare ids, not the streamed text (the stream gets id 0 for each token)
        got.extend(generate(*args, on_token=lambda _: on_token(0), **kwargs))
        return got

    recipe.generate = recorded
    recipe.main(cfg)
    tokenizer = HFTokenizer(folder)
    inputs = image_chat_prompt(
        tokenizer, MllamaImageTransform(tile_size=MLLAMA_TILE), text=PROMPT, images=[Image.open(image)]
    )
    assert sorted(inputs.image_inputs) == [
        "aspect_ratio_ids",
        "aspect_ratio_mask",
        "cross_attention_mask",
        "image_sample",
    ]
    expected = generate(
        load_hf(folder, image_text=True).eval(),
        inputs.tokens[0],
        max_new_tokens=8,
        stop_tokens=tokenizer.stop_tokens,
        pixel_values=inputs.pixel_values,
        image_inputs=inputs.image_inputs,
    )
    assert got == expected and len(got) == 8


def _heldout(data: Path, answers: list[str]) -> Path:
    """The drawn discs as image QA records: the question with its image, then the reference answer."""
    lines = []
    for name, answer in zip(("red", "green"), answers):
        question = [{"type": "image", "image": f"{name}.png"}, {"type": "text", "text": PROMPT}]
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        lines.append(json.dumps({"messages": messages}) + "\n")
    path = data / f"heldout_{len(list(data.glob('heldout_*')))}.jsonl"
    path.write_text("".join(lines))
    return path


def _eval_cfg(folder: Path, heldout: Path, *overrides: str):
    return load_config(
        "smolvlm/256M_eval",
        [
            f"tokenizer.path={folder}",
            f"checkpointer.checkpoint_dir={folder}",
            f"heldout_file={heldout}",
            "max_new_tokens=6",
            "batch_size=2",  # both records in one batch, each with its image
            "~image_transform",
            "image_transform._component_=ftune.data.Idefics3ImageTransform",
            *TRANSFORM_KEYS,
            *overrides,
        ],
    )


def test_eval_scores_image_questions_by_exact_match(vlm, tmp_path) -> None:
    folder, data = vlm
    tokenizer, model = HFTokenizer(folder), load_hf(folder, image_text=True).eval()
    answers = []  # what the model answers each question alone, with its image
    for name in ("red", "green"):
        inputs = image_chat_prompt(
            tokenizer,
            Idefics3ImageTransform(**TRANSFORM),
            text=PROMPT,
            images=[Image.open(data / f"{name}.png")],
        )
        ids = generate(
            model,
            inputs.tokens[0],
            max_new_tokens=6,
            stop_tokens=tokenizer.stop_tokens,
            pixel_values=inputs.pixel_values,
        )
        answers.append(
            tokenizer.decode([t for t in ids if t not in tokenizer.stop_tokens], skip_special_tokens=True)
        )
    # the first reference is the model's own answer, the second is not: 1 of 2
    heldout = _heldout(data, [answers[0], answers[1] + " no"])
    out = tmp_path / "results.json"
    load_recipe("eval").main(_eval_cfg(folder, heldout, f"output_file={out}"))
    result = json.loads(out.read_text())["exact_match"]
    assert (result["num_correct"], result["num_total"]) == (1, 2)
    assert [s["prediction"] for s in result["samples"]] == answers


def test_eval_refuses_an_unreadable_image_before_the_model_loads(vlm, tmp_path, monkeypatch) -> None:
    folder, data = vlm
    heldout = tmp_path / "heldout.jsonl"
    question = [{"type": "image", "image": "gone.png"}, {"type": "text", "text": PROMPT}]
    heldout.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": "red"}]}
        )
        + "\n"
    )
    monkeypatch.setattr("ftune.checkpointing.load_inference_model", _no_load)
    with pytest.raises(
        ImageReadError,
        match=r"heldout.jsonl:1: messages\[0\].content\[0\].image: image file '.*gone.png' does not exist",
    ):
        load_recipe("eval").main(_eval_cfg(folder, heldout))


@pytest.mark.parametrize(
    ("model_type", "transform", "check"),
    [
        ("smolvlm", "Idefics3ImageTransform", ("tile", 512)),
        ("idefics3", "Idefics3ImageTransform", ("image_seq_len", 64)),
        ("gemma3", "Gemma3ImageTransform", ("placeholder", "<start_of_image>")),
        ("mllama", "MllamaImageTransform", ("tile", 560)),
        ("llava", "LlavaImageTransform", ("image_size", 56)),
    ],
)
def test_an_image_config_without_image_transform_takes_the_familys(model_type, transform, check) -> None:
    config = {"model_type": model_type, "vision_config": {"image_size": 56, "patch_size": 7}}
    got = family_image_transform(config)
    assert type(got).__name__ == transform
    assert getattr(got, check[0]) == check[1]
