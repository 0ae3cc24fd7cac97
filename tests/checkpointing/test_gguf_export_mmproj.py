"""GGUF export of image-text models (ftune.checkpointing.gguf.export_mmproj): the text decoder as the
model file and the vision tower and projector as `mmproj-*.gguf`, as llama.cpp's converter writes them
with --mmproj. Tiny seeded Gemma 3 and SmolVLM (Idefics3) folders; their tensors are named as the
`gguf` package's own name map names the checkpoint's tensors (the map llama.cpp's converter uses),
hold the checkpoint's values, and the `clip.*` metadata says what llama.cpp's clip loader reads.

`tiny_vlm_folder` is imported by test_gguf_export_mmproj_llama_cpp.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_gguf_export import CHATML, GEMMA_TEMPLATE, VOCAB, byte_level_tokenizer, sentencepiece_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import _COMMON, GEMMA3_TINY  # noqa: E402
from ftune_tiny_vlm import SIGLIP_TINY, randomise, tiny_llama_text_config  # noqa: E402

from ftune.checkpointing.gguf.export import export_gguf  # noqa: E402
from ftune.cli.main import main  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# A non-default normalisation, so that the test sees it travel from preprocessor_config.json.
MEAN, STD = [0.48, 0.46, 0.41], [0.27, 0.26, 0.28]
# Where transformers 5.24 saves the vision tower and projector of Gemma 3 and Idefics3.
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_model.", "model.connector.")
IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
IDEFICS3_TOKENS += [f"<row_{r}_col_{c}>" for r in range(1, 4) for c in range(1, 4)]


def tiny_vlm_folder(folder: Path, kind: str, *, seed: int = 0, window: int = 64) -> Path:
    """A seeded tiny image-text checkpoint folder with a trained tokenizer: `kind` "gemma3" (the tiny
    SigLIP, 16 tokens an image, a 6-layer text decoder in llama.cpp's Gemma 3 layer pattern) or
    "smolvlm" (Idefics3: the tiny SigLIP, pixel shuffle by 2, a SmolLM2 decoder, the tokens SmolVLM's
    processor writes around images). `window`: Gemma 3's sliding window (64: longer than any prompt)."""
    import transformers

    vision = dict(model_type="siglip_vision_model", vision_use_head=False, **SIGLIP_TINY)
    if kind == "gemma3":
        layers = {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
        sizes = {"query_pre_attn_scalar": 16, "vocab_size": VOCAB, "sliding_window": window}
        text = transformers.Gemma3TextConfig(**{**_COMMON, **GEMMA3_TINY, **layers, **sizes}).to_dict()
        ids = dict(boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2, image_token_index=VOCAB - 1)
        config = transformers.Gemma3Config(
            text_config=text, vision_config=vision, mm_tokens_per_image=16, **ids
        )
        model = transformers.Gemma3ForConditionalGeneration(config)
        tok = sentencepiece_tokenizer("gemma")
        names = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
        extra = {"add_bos_token": True, "add_eos_token": False, "chat_template": GEMMA_TEMPLATE}
        size: dict[str, Any] = {"height": SIGLIP_TINY["image_size"], "width": SIGLIP_TINY["image_size"]}
    else:
        tok = byte_level_tokenizer("smollm")
        tok.add_tokens(["\n\n"])  # llama.cpp looks "\n\n" up as one token, as SmolVLM's vocabulary has it
        tok.add_special_tokens(IDEFICS3_TOKENS)
        text = {**tiny_llama_text_config("smollm2"), "vocab_size": VOCAB}
        config = transformers.Idefics3Config(
            text_config=text,
            vision_config=dict(SIGLIP_TINY),
            scale_factor=2,
            image_token_id=tok.token_to_id("<image>"),
        )
        model = transformers.Idefics3ForConditionalGeneration(config)
        names = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        extra = {"add_bos_token": False, "chat_template": CHATML}
        size = {"longest_edge": SIGLIP_TINY["image_size"]}
    randomise(model, seed).save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    config_json = {"tokenizer_class": "PreTrainedTokenizerFast", **names, **extra}
    (folder / "tokenizer_config.json").write_text(json.dumps(config_json))
    pre = {"image_mean": MEAN, "image_std": STD, "size": size}
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    out = {}
    for kind in ("gemma3", "smolvlm"):
        root = tmp_path_factory.mktemp(kind)
        folder = tiny_vlm_folder(root / "model", kind)
        out[kind] = (folder, export_gguf(folder, root / "vlm.gguf", file_type="f32"))
    return out


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.fields[key]
    values = [field.contents(i) for i in range(len(field.data))] if len(field.data) > 1 else field.contents()
    return values


@pytest.mark.parametrize("kind", ["gemma3", "smolvlm"])
def test_mmproj_holds_llama_cpp_names_and_the_checkpoint_values(kind: str, exported: dict) -> None:
    folder, result = exported[kind]
    assert result.mmproj == folder.parent / "mmproj-vlm.gguf"
    hf = load_file(str(folder / "model.safetensors"))
    # The checkpoint's vision and projector tensors under the names gguf's own map gives them (the map
    # llama.cpp's converter uses), Gemma 3's `_weight` projector renamed as that converter renames it.
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, SIGLIP_TINY["num_hidden_layers"])
    want = {}
    for key, value in hf.items():
        # transformers 5 saves Gemma 3's tower without Google's `vision_model.` level, which the map expects.
        name = re.sub(r"^vision_tower\.(?!vision_model\.)", "vision_tower.vision_model.", key)
        stem, _, suffix = name.replace("_weight", ".weight").rpartition(".")
        if key.startswith(VISION_PREFIXES):
            want[f"{names.get_name(stem)}.{suffix}"] = value + 1 if "soft_emb_norm" in key else value
    reader = gguf.GGUFReader(result.mmproj)
    got = {t.name: t for t in reader.tensors}
    assert sorted(got) == sorted(want)
    for name, tensor in got.items():
        assert tensor.tensor_type == gguf.GGMLQuantizationType.F32, name
        values = np.asarray(tensor.data).reshape(tuple(reversed([int(d) for d in tensor.shape])))
        np.testing.assert_array_equal(values, want[name].numpy(), err_msg=name)

    projector = {"gemma3": "gemma3", "smolvlm": "idefics3"}[kind]
    expected = {
        "general.architecture": "clip",
        "general.type": "mmproj",
        "clip.has_vision_encoder": True,
        "clip.projector_type": projector,
        "clip.vision.projection_dim": 64,
        "clip.vision.image_size": 56,
        "clip.vision.patch_size": 7,
        "clip.vision.embedding_length": 32,
        "clip.vision.feed_forward_length": 48,
        "clip.vision.block_count": 2,
        "clip.vision.attention.head_count": 2,
        "clip.vision.attention.layer_norm_epsilon": pytest.approx(1e-6),
        "clip.use_gelu": True,
        "clip.vision.image_mean": pytest.approx(MEAN),
        "clip.vision.image_std": pytest.approx(STD),
        # 8 x 8 patches: pooled 2 x 2 to 16 tokens (Gemma 3), shuffled by 2 (Idefics3).
        "clip.vision.projector.scale_factor": 2,
    }
    if kind == "smolvlm":
        expected["clip.vision.preproc_image_size"] = 56
    for key, value in expected.items():
        assert _field(reader, key) == value, key


@pytest.mark.parametrize("kind", ["gemma3", "smolvlm"])
def test_model_file_is_the_text_decoder(kind: str, exported: dict) -> None:
    folder, result = exported[kind]
    reader = gguf.GGUFReader(result.path)
    assert _field(reader, "general.architecture") == {"gemma3": "gemma3", "smolvlm": "llama"}[kind]
    names = [t.name for t in reader.tensors]
    assert not [n for n in names if n.startswith(("v.", "mm."))]
    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    hf = load_file(str(folder / "model.safetensors"))
    key = {
        "gemma3": "language_model.model.embed_tokens.weight",
        "smolvlm": "model.text_model.embed_tokens.weight",
    }
    np.testing.assert_array_equal(np.asarray(embed.data).reshape(VOCAB, 64), hf[key[kind]].numpy())


def test_f16_mmproj_keeps_embeddings_and_vectors_f32(exported: dict, tmp_path: Path) -> None:
    folder, _ = exported["gemma3"]
    result = export_gguf(folder, tmp_path / "vlm.gguf", file_type="q8_0")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(result.mmproj).tensors}
    F32, F16 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16
    assert types["v.patch_embd.weight"] == types["v.position_embd.weight"] == F32
    assert (
        types["v.blk.0.ln1.weight"] == types["v.blk.0.attn_q.bias"] == types["mm.soft_emb_norm.weight"] == F32
    )
    assert types["v.blk.0.attn_q.weight"] == types["mm.input_projection.weight"] == F16
    assert _field(gguf.GGUFReader(result.mmproj), "general.file_type") == gguf.LlamaFileType.MOSTLY_F16


def test_cli_writes_both_files_and_says_how_to_run_them(
    exported: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder, _ = exported["smolvlm"]
    out = tmp_path / "smolvlm.gguf"
    assert main(["export", "gguf", str(folder), str(out), "--type", "f16"]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "mmproj-smolvlm.gguf").is_file()
    assert f"llama-mtmd-cli -m {out} --mmproj {tmp_path / 'mmproj-smolvlm.gguf'}" in printed
    # An existing projector file is replaced only with --force, as the model file is.
    out.unlink()
    out.with_suffix(".Modelfile").unlink()
    assert main(["export", "gguf", str(folder), str(out), "--type", "f16"]) == 1
    assert "mmproj-smolvlm.gguf" in capsys.readouterr().err


def test_llava_is_refused_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "llava"
    folder.mkdir()
    config = {
        "model_type": "llava",
        "vision_config": {"model_type": "siglip_vision_model"},
        "text_config": {},
    }
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json' describes a 'llava' image-text model.*tanh.*Gemma 3"):
        export_gguf(folder, tmp_path / "out.gguf", file_type="f16")
    assert not (tmp_path / "out.gguf").exists()


def test_projector_values_survive_bf16_weights(tmp_path: Path) -> None:
    """A bf16 checkpoint (as fine-tunes are saved) exports its tower as the same values in F32."""
    folder = tiny_vlm_folder(tmp_path / "model", "smolvlm")
    state = load_file(str(folder / "model.safetensors"))
    from safetensors.torch import save_file

    save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, str(folder / "model.safetensors"))
    result = export_gguf(folder, tmp_path / "vlm.gguf", file_type="f32")
    fc = next(t for t in gguf.GGUFReader(result.mmproj).tensors if t.name == "mm.model.fc.weight")
    want = state["model.connector.modality_projection.proj.weight"].to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(np.asarray(fc.data).reshape(want.shape), want)
