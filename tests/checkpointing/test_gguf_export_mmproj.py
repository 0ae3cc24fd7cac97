"""GGUF export of image-text models (ftune.checkpointing.gguf.export_mmproj): the text decoder as the
model file and the vision tower and projector as `mmproj-*.gguf`, as llama.cpp's converter writes them
with --mmproj. Tiny seeded Gemma 3 and SmolVLM (Idefics3) folders; their tensors are named as the
`gguf` package's own name map names the checkpoint's tensors (the map llama.cpp's converter uses),
hold the checkpoint's values, and the `clip.*` metadata says what llama.cpp's clip loader reads.

The tiny folders are `tiny_vlm_gguf.tiny_vlm_folder`'s.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_gguf_export import VOCAB
from tiny_vlm_gguf import MEAN, SIGLIP_TINY, STD, VISION_PREFIXES, tiny_vlm_folder

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.export_lora import export_lora_gguf
from ftune.checkpointing.gguf.export_mmproj import mmproj_name, projector_type
from ftune.cli.main import main
from ftune.models import image_text_model_from_hf_config
from ftune.peft import apply_lora

pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_mllama_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "mllama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "mllama"}))
    assert main(["export", "gguf", str(folder), str(tmp_path / "out.gguf"), "--type", "f16"]) == 1


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


@pytest.mark.parametrize("whole", [True, False], ids=["image-text-adapter", "text-decoder-adapter"])
def test_adapter_is_merged_into_the_files_it_adapts(whole: bool, exported: dict, tmp_path: Path) -> None:
    """--adapter: a LoRA step folder of the model read whole (checkpointer.image_text=true; here on
    the decoder and the tower) merges into both files; one of its text decoder alone (image_text=false)
    into the model file, the projector file staying the base's."""
    folder, base = exported["gemma3"]
    if whole:
        _, _, model = image_text_model_from_hf_config(json.loads((folder / "config.json").read_text()))
        model.load_state_dict(HFCheckpointer(folder, image_text=True).load().model)
        apply_lora(model, targets={"decoder": ["v_proj"], "vision_encoder": ["q_proj"]}, rank=4, alpha=8.0)
        decoder = model.decoder
    else:
        model = decoder = load_hf(folder)
        apply_lora(model, targets=["v_proj"], rank=4, alpha=8.0)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.normal_(0.0, 0.1)
    settings = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "use_dora": False}
    HFCheckpointer(folder, tmp_path / "run", image_text=whole).save(
        2, model.state_dict(), adapter_config=settings
    )
    result = export_gguf(
        folder, tmp_path / "ft.gguf", file_type="f32", adapter_dir=tmp_path / "run" / "step_2"
    )

    def tensor(path: Path, name: str) -> np.ndarray:
        t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
        return np.asarray(t.data).reshape(tuple(reversed([int(d) for d in t.shape])))

    v = decoder.layers[0].attn.v_proj
    np.testing.assert_allclose(
        tensor(result.path, "blk.0.attn_v.weight"), v.merged_weight().detach().numpy(), atol=1e-6
    )
    assert not np.array_equal(tensor(result.path, "blk.0.attn_v.weight"), v.weight.detach().numpy())
    q = tensor(result.mmproj, "v.blk.0.attn_q.weight")
    if whole:
        want = model.vision_encoder.layers[0].self_attn.q_proj.merged_weight().detach().numpy()
        np.testing.assert_allclose(q, want, atol=1e-6)
    else:
        np.testing.assert_array_equal(q, tensor(base.mmproj, "v.blk.0.attn_q.weight"))


def test_without_preprocessor_config_the_published_values_are_written_and_said(
    exported: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, _ = exported["smolvlm"]
    bare = tmp_path / "step_2"
    shutil.copytree(folder, bare)
    (bare / "preprocessor_config.json").unlink()
    with caplog.at_level(logging.WARNING):
        result = export_gguf(bare, tmp_path / "vlm.gguf", file_type="f32")
    assert "has no preprocessor_config.json: the projector file gets the published values" in caplog.text
    reader = gguf.GGUFReader(result.mmproj)
    assert _field(reader, "clip.vision.image_mean") == pytest.approx([0.5] * 3)
    assert _field(reader, "clip.vision.image_std") == pytest.approx([0.5] * 3)
    assert _field(reader, "clip.vision.preproc_image_size") == 4 * 56  # SmolVLM's 4 tiles a side


def _vlm_adapter(folder: Path, out: Path, targets: dict[str, list[str]]) -> Path:
    """A LoRA step folder of the image-text model read whole, random A and B on `targets` (per part)."""
    _, _, model = image_text_model_from_hf_config(json.loads((folder / "config.json").read_text()))
    model.load_state_dict(HFCheckpointer(folder, image_text=True).load().model)
    apply_lora(model, targets=targets, rank=4, alpha=8.0)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.normal_(0.0, 0.1)
    settings = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "use_dora": False}
    HFCheckpointer(folder, out, image_text=True).save(2, model.state_dict(), adapter_config=settings)
    return out / "step_2"


@pytest.mark.parametrize("kind", ["gemma3", "smolvlm"])
def test_adapter_only_of_a_vlm_is_a_lora_file_of_its_text_decoder(
    kind: str, exported: dict, tmp_path: Path
) -> None:
    folder, _ = exported[kind]
    step = _vlm_adapter(folder, tmp_path / "run", {"decoder": ["q_proj", "v_proj"]})
    result = export_lora_gguf(folder, step, tmp_path / "ft.lora.gguf", file_type="f32")
    names = sorted(t.name for t in gguf.GGUFReader(result.path).tensors)
    assert names[:4] == ["blk.0.attn_q.weight.lora_a", "blk.0.attn_q.weight.lora_b"] + [
        "blk.0.attn_v.weight.lora_a",
        "blk.0.attn_v.weight.lora_b",
    ]
    assert len(names) == 4 * {"gemma3": 6, "smolvlm": 2}[kind]

    tower = _vlm_adapter(folder, tmp_path / "run2", {"decoder": ["v_proj"], "vision_encoder": ["q_proj"]})
    with pytest.raises(
        ValueError, match=r"changes model\.vision_\w+\.encoder\.layers\.0\.self_attn\.q_proj.*merged"
    ):
        export_lora_gguf(folder, tower, tmp_path / "tower.lora.gguf", file_type="f32")


def test_names_and_model_types_without_a_projector_file_are_refused(tmp_path: Path) -> None:
    assert mmproj_name("vision_encoder.layers.11.mlp.fc2.bias") == "v.blk.11.ffn_down.bias"
    with pytest.raises(KeyError, match=r"'vision_encoder.class_embedding' has no llama.cpp counterpart"):
        mmproj_name("vision_encoder.class_embedding")
    with pytest.raises(ValueError, match=r"model_type 'qwen2_vl' is no image-text model .* accepted: gemma3"):
        projector_type({"model_type": "qwen2_vl"}, source=tmp_path)
