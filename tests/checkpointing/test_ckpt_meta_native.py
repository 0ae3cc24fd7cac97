"""MetaCheckpointer (consolidated.00.pth + params.json) and NativeCheckpointer (ftune names, quantized)."""

import json
from pathlib import Path

import pytest
import torch
from ckpt_tiny_hf import assert_same_tensors, write_hf_folder

from ftune.checkpointing import HFCheckpointer, MetaCheckpointer, NativeCheckpointer, load_into
from ftune.checkpointing.native import write_native
from ftune.models import CONVERTERS
from ftune.models.llama3 import llama3
from ftune.models.llama3_2 import llama3_2

SIZES = dict(
    vocab_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=32,
    intermediate_dim=64,
    max_seq_len=64,
)
PARAMS = {
    "dim": 32,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "vocab_size": 128,
    "norm_eps": 1e-5,
    "rope_theta": 500000.0,
}


def _ftune_state(family: str, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = (llama3 if family == "llama3" else llama3_2)(**SIZES)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _meta_folder(folder: Path, family: str) -> tuple[Path, dict]:
    folder.mkdir(parents=True)
    state = _ftune_state(family)
    meta_sd = CONVERTERS[family].ftune_to_meta(state, num_heads=4, num_kv_heads=2)
    torch.save(meta_sd, folder / "consolidated.00.pth")
    (folder / "params.json").write_text(json.dumps(PARAMS))
    (folder / "tokenizer.model").write_bytes(b"stand-in sentencepiece model")
    return folder, state


@pytest.mark.parametrize("family", ["llama3", "llama3_2"])  # llama3_2: tied embeddings
def test_meta_round_trip(tmp_path: Path, family: str) -> None:
    src, state = _meta_folder(tmp_path / "in", family)
    ckpt = MetaCheckpointer(src, tmp_path / "out", model_type=family)
    loaded = ckpt.load()
    assert loaded.family == family
    assert_same_tensors(loaded.model, state)
    out = ckpt.save(1, loaded.model, recipe_state={"step": 1})
    assert sorted(p.name for p in out.iterdir()) == [
        ".complete",
        "consolidated.00.pth",
        "params.json",
        "recipe_state.pt",
        "tokenizer.model",
    ]
    assert_same_tensors(
        torch.load(out / "consolidated.00.pth", weights_only=True),
        torch.load(src / "consolidated.00.pth", weights_only=True),
    )
    assert json.loads((out / "params.json").read_text()) == PARAMS
    resumed = MetaCheckpointer(src, tmp_path / "out", model_type=family, resume_from_checkpoint="auto").load()
    assert resumed.step_dir == out
    assert_same_tensors(resumed.model, state)


def test_meta_needs_model_type(tmp_path: Path) -> None:
    src, _ = _meta_folder(tmp_path / "in", "llama3")
    with pytest.raises(
        ValueError, match=r"MetaCheckpointer needs model_type=<family>: params\.json in '.*in' does not"
    ):
        MetaCheckpointer(src, tmp_path / "out").load()


def test_meta_truncated_file_is_one_line(tmp_path: Path) -> None:
    src, _ = _meta_folder(tmp_path / "in", "llama3")
    pth = src / "consolidated.00.pth"
    pth.write_bytes(pth.read_bytes()[:1000])
    with pytest.raises(
        ValueError,
        match=r"^cannot read checkpoint file '.*consolidated\.00\.pth' \(.*\)\. The file is truncated",
    ) as err:
        MetaCheckpointer(src, tmp_path / "out", model_type="llama3").load()
    assert "\n" not in str(err.value)


def test_native_round_trip_from_hf_base(tmp_path: Path) -> None:
    hf = write_hf_folder(tmp_path / "hf", "smollm2")
    state = HFCheckpointer(hf, tmp_path / "unused").load().model
    native = tmp_path / "native"
    native.mkdir()
    write_native(native, state, "smollm2")
    ckpt = NativeCheckpointer(native, tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == "smollm2"
    assert_same_tensors(loaded.model, state)
    out = ckpt.save(2, loaded.model)
    assert json.loads((out / "ftune_meta.json").read_text()) == {
        "format": "ftune",
        "version": 1,
        "family": "smollm2",
        "weights": "model.safetensors",
    }
    assert_same_tensors(NativeCheckpointer(out, tmp_path / "o2").load().model, state)


def test_native_quantized_round_trip(tmp_path: Path) -> None:
    from ftune.quantization import Int8WeightOnly

    hf = write_hf_folder(tmp_path / "hf", "llama3")
    config = json.loads((hf / "config.json").read_text())
    model = llama3(**SIZES)
    load_into(model, HFCheckpointer(hf, tmp_path / "unused").load())
    Int8WeightOnly().quantize(model)
    state = model.state_dict()
    assert any(type(t) is not torch.Tensor for t in state.values())
    native = tmp_path / "native"
    native.mkdir()
    (native / "config.json").write_text(json.dumps(config))
    write_native(native, state, "llama3", hf_config=config)
    ckpt = NativeCheckpointer(native, tmp_path / "out")
    out = ckpt.save(1, ckpt.load().model)
    assert json.loads((out / "ftune_meta.json").read_text())["weights"] == "model.pt"
    assert json.loads((out / "config.json").read_text()) == config
    back = NativeCheckpointer(out, tmp_path / "o2").load().model
    assert sorted(back) == sorted(state)
    for k, v in state.items():
        assert type(back[k]) is type(v), k
        dense = v.dequantize() if type(v) is not torch.Tensor else v
        assert torch.equal(back[k].dequantize() if type(v) is not torch.Tensor else back[k], dense), k
    # The file is ftune.quantization's format: its loader rebuilds the model alone.
    from ftune.quantization import load_quantized

    rebuilt, metadata = load_quantized(out / "model.pt")
    assert metadata["family"] == "llama3"
    tokens = torch.randint(0, 128, (1, 6))
    with torch.no_grad():
        assert torch.equal(rebuilt(tokens), model(tokens))


def test_native_folder_without_metadata(tmp_path: Path) -> None:
    hf = write_hf_folder(tmp_path / "hf", "smollm2")
    with pytest.raises(
        FileNotFoundError, match=r"ftune_meta\.json' is missing: '.*hf' is not an ftune native checkpoint"
    ):
        NativeCheckpointer(hf, tmp_path / "out").load()
