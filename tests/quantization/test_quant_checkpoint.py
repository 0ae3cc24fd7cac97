"""Native quantized checkpoints: save -> load gives identical logits, loads with weights_only=True."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torchao.quantization import IntxUnpackedToInt8Tensor

from ftune.generation import generate
from ftune.modules.transformer import TransformerDecoder
from ftune.quantization import (
    Int8DynActInt4Weight,
    Int8WeightOnly,
    load_quantized,
    quantizer_from_spec,
    read_quantized,
    save_quantized,
)

Builder = Callable[..., TransformerDecoder]


def metadata(hf_config: dict, quantizer) -> dict:
    return {"family": "llama3", "hf_config": hf_config, "quantizer": quantizer.spec()}


@pytest.mark.parametrize("quantizer", [Int8DynActInt4Weight(group_size=32), Int8WeightOnly()], ids=repr)
def test_save_then_load_gives_identical_logits(
    build_model: Builder, hf_config: dict, tokens: torch.Tensor, tmp_path: Path, quantizer
) -> None:
    model = build_model()
    quantizer.quantize(model)
    with torch.no_grad():
        expected = model(tokens)
    path = save_quantized(model, tmp_path / "out" / "model_quantized.pt", metadata(hf_config, quantizer))
    assert path.is_file() and not (tmp_path / "out" / "model_quantized.pt.tmp").exists()

    # Rebuilt from the metadata alone, from a builder, and into a given float model (other seed).
    for target in (None, lambda: build_model(seed=5), build_model(seed=6)):
        loaded, meta = load_quantized(path, target)
        with torch.no_grad():
            assert torch.equal(loaded(tokens), expected)
        assert meta == metadata(hf_config, quantizer)
        assert quantizer_from_spec(meta["quantizer"]).spec() == quantizer.spec()
        assert not any(p.requires_grad for p in loaded.parameters())


def test_file_is_plain_weights_only_loadable(build_model: Builder, hf_config: dict, tmp_path: Path) -> None:
    model = build_model()
    Int8DynActInt4Weight(group_size=32).quantize(model)
    path = save_quantized(model, tmp_path / "q.pt", {"hf_config": hf_config})
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == "ftune.quantized"
    assert type(payload["state_dict"]["layers.1.mlp.down_proj.weight"]) is IntxUnpackedToInt8Tensor
    meta, state = read_quantized(path)
    assert meta == {"hf_config": hf_config} and state.keys() == model.state_dict().keys()


def test_qat_converted_model_round_trips(build_model: Builder, tokens: torch.Tensor, tmp_path: Path) -> None:
    model, q = build_model(), Int8DynActInt4Weight(group_size=32)
    q.prepare(model)
    q.convert(model)
    with torch.no_grad():
        expected = model(tokens)
    loaded, _ = load_quantized(save_quantized(model, tmp_path / "q.pt", {}), build_model(seed=3))
    with torch.no_grad():
        assert torch.equal(loaded(tokens), expected)


def test_errors(build_model: Builder, hf_config: dict, tmp_path: Path) -> None:
    model = build_model()
    Int8WeightOnly().quantize(model)
    with pytest.raises(
        ValueError, match=r"metadata for .*q.pt must be JSON-serializable .*quantizer.spec\(\)"
    ):
        save_quantized(model, tmp_path / "q.pt", {"quantizer": Int8WeightOnly()})
    with pytest.raises(ValueError, match=r"save_quantized: metadata must be a dict, got list"):
        save_quantized(model, tmp_path / "q.pt", [])
    with pytest.raises(FileNotFoundError, match=r"load_quantized: no quantized checkpoint at .*missing.pt"):
        load_quantized(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"other.pt is not an ftune quantized checkpoint"):
        load_quantized(tmp_path / "other.pt")
    path = save_quantized(model, tmp_path / "q.pt", {"family": "llama3"})
    with pytest.raises(ValueError, match=r"has no 'hf_config' in its metadata \(keys: \['family'\]\)"):
        load_quantized(path)
    with pytest.raises(
        ValueError, match=r"does not match TransformerDecoder: missing keys \[\], unexpected keys \['layers.1"
    ):
        load_quantized(path, build_model(num_hidden_layers=1))


def test_loaded_quantized_model_generates_with_its_kv_cache(
    build_model: Builder, hf_config: dict, tmp_path: Path
) -> None:
    model = build_model()
    Int8DynActInt4Weight(group_size=32).quantize(model)
    loaded, _ = load_quantized(save_quantized(model, tmp_path / "q.pt", {"hf_config": hf_config}))
    prompt, expected = [5, 9, 31, 2], []
    with torch.no_grad():
        for _ in range(6):
            expected.append(int(loaded(torch.tensor([prompt + expected]))[0, -1].argmax()))
    assert generate(loaded, prompt, max_new_tokens=6) == expected
