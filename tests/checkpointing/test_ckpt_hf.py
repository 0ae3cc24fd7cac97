"""HFCheckpointer: exact round trips (single, sharded, .bin), transformers parity, errors."""

import json
from pathlib import Path

import pytest
import torch
from ckpt_tiny_hf import TOKENIZER_FILES, assert_same_tensors, ftune_model, write_hf_folder
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer, load_into
from ftune.models import CONVERTERS


def _files(folder: Path, pattern: str) -> list[str]:
    return sorted(p.name for p in folder.glob(pattern))


def _read(folder: Path, name: str) -> dict:
    path = folder / name
    return load_file(path) if name.endswith(".safetensors") else torch.load(path, weights_only=True)


@pytest.mark.parametrize(
    ("family", "shards", "fmt"),
    [
        ("smollm2", 1, "safetensors"),
        ("qwen2_5", 2, "safetensors"),
        ("llama3", 1, "bin"),
        ("llama3", 2, "bin"),
    ],
)
def test_round_trip_keeps_files_layout_and_every_tensor(
    tmp_path: Path, family: str, shards: int, fmt: str
) -> None:
    src = write_hf_folder(tmp_path / "in", family, shards=shards, fmt=fmt)
    ckpt = HFCheckpointer(src, tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == family and loaded.adapter is None and loaded.recipe_state is None
    assert loaded.step_dir is None
    weight_files = "*.safetensors" if fmt == "safetensors" else "*.bin"
    hf_in = {k: v for name in _files(src, weight_files) for k, v in _read(src, name).items()}
    assert_same_tensors(loaded.model, CONVERTERS[family].hf_to_ftune(hf_in))

    out = ckpt.save(1, loaded.model)
    assert out == tmp_path / "out" / "step_1"
    # Same file names, and each file holds exactly the tensors it held in the input.
    assert _files(out, weight_files) == _files(src, weight_files)
    for name in _files(src, weight_files):
        assert_same_tensors(_read(out, name), _read(src, name))
    index_names = _files(src, "*.index.json")
    assert _files(out, "*.index.json") == index_names
    for name in index_names:
        index_in, index_out = (json.loads((d / name).read_text()) for d in (src, out))
        assert index_out["weight_map"] == index_in["weight_map"]
        assert index_out["metadata"]["total_size"] == sum(
            t.numel() * t.element_size() for t in hf_in.values()
        )
    for name, text in TOKENIZER_FILES.items():
        assert (out / name).read_text() == text
    assert (out / "generation_config.json").read_text() == (src / "generation_config.json").read_text()
    assert json.loads((out / "config.json").read_text()) == json.loads((src / "config.json").read_text())
    assert (out / ".complete").is_file()

    again = HFCheckpointer(out, tmp_path / "out2").load()
    assert_same_tensors(again.model, loaded.model)


def test_tied_model_writes_no_lm_head(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    loaded = ckpt.load()
    assert "output.weight" not in loaded.model
    out = ckpt.save(2, loaded.model)
    assert "lm_head.weight" not in load_file(out / "model.safetensors")


@pytest.mark.parametrize(("family", "shards"), [("smollm2", 1), ("llama3", 2)])
def test_transformers_loads_output_with_ftune_logits(
    tmp_path: Path, tokens: torch.Tensor, family, shards
) -> None:
    import transformers

    src = write_hf_folder(tmp_path / "in", family, shards=shards)
    ckpt = HFCheckpointer(src, tmp_path / "out")
    model = ftune_model(src)
    load_into(model, ckpt.load())
    with torch.no_grad():  # "training": every tensor changes, so the output differs from the input
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
        expected = model(tokens)
    out = ckpt.save(5, model.state_dict())
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        got = hf(tokens).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_bf16_save_records_dtype_in_config(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    state = {k: v.to(torch.bfloat16) for k, v in ckpt.load().model.items()}
    out = ckpt.save(1, state)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert all(t.dtype == torch.bfloat16 for t in load_file(out / "model.safetensors").values())


# ---- errors a user can hit ------------------------------------------------------------------------


def test_missing_folder_names_it_and_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError,
        match=r"checkpoint folder '.*nope' does not exist or is not a folder\. Download a model with "
        r"`ftune download <repo> --output-dir .*nope`, or convert a GGUF file with "
        r"`ftune convert gguf <file\.gguf> --output-dir .*nope`, or fix the path\.",
    ):
        HFCheckpointer(tmp_path / "nope", tmp_path / "out").load()


def test_missing_shard_names_it_and_the_index(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "llama3", shards=2)
    (src / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"checkpoint file '.*model-00002-of-00002\.safetensors' is missing, listed in "
        r"model\.safetensors\.index\.json",
    ):
        HFCheckpointer(src, tmp_path / "out").load()


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_truncated_shard_is_one_line_naming_the_file(tmp_path: Path, fmt: str) -> None:
    src = write_hf_folder(tmp_path / "in", "llama3", shards=2, fmt=fmt)
    prefix = "model" if fmt == "safetensors" else "pytorch_model"
    shard = src / f"{prefix}-00002-of-00002.{fmt}"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(
        ValueError,
        match=rf"^cannot read checkpoint file '.*{prefix}-00002-of-00002\.{fmt}' \(.*\)\. The file is truncated or "
        r"corrupt: download or convert the checkpoint again\.$",
    ) as err:
        HFCheckpointer(src, tmp_path / "out").load()
    assert "\n" not in str(err.value)


def test_folder_without_weights(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    (src / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"no Hugging Face weights in '.*in': expected model\.safetensors"
    ):
        HFCheckpointer(src, tmp_path / "out").load()


def test_missing_config_asks_for_model_type(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    (src / "config.json").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"config\.json' is missing.*pass model_type=<family> to HFCheckpointer"
    ):
        HFCheckpointer(src, tmp_path / "out").load()
    assert HFCheckpointer(src, tmp_path / "out", model_type="smollm2").load().family == "smollm2"


def test_unknown_model_type_suggests_the_close_one(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    with pytest.raises(
        KeyError, match=r"model_type 'smolm2' is not a known model family\. Did you mean 'smollm2'\?"
    ):
        HFCheckpointer(src, tmp_path / "out", model_type="smolm2").load()


def test_unsupported_architecture_names_config(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(
        json.dumps({**config, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    )
    with pytest.raises(
        ValueError, match=r"cannot tell the model family from config\.json \(.*config\.json\).*gpt2"
    ):
        HFCheckpointer(src, tmp_path / "out").load()


def test_quantized_tensor_cannot_go_to_hf(tmp_path: Path) -> None:
    from ftune.peft.nf4 import to_nf4_parameter

    src = write_hf_folder(tmp_path / "in", "smollm2")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    state = dict(ckpt.load().model)
    state["layers.0.attn.q_proj.weight"] = to_nf4_parameter(state["layers.0.attn.q_proj.weight"]).data
    with pytest.raises(
        TypeError,
        match=r"'layers\.0\.attn\.q_proj\.weight' is a NF4Tensor \(a quantized tensor\).*Save quantized models with NativeCheckpointer",
    ):
        ckpt.save(1, state)
