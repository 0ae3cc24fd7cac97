"""Qwen3 and Gemma 3 through ftune's checkpointer and PEFT: an exact HF round trip that
transformers loads, adapters that `peft` loads, and QLoRA/DoRA swaps that train."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import load_file, save_file

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.peft import adapter_state_dict, apply_lora, peft_adapter_config, to_peft

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

FAMILIES = ["qwen3", "gemma3"]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# Small forwards: one thread (tests/conftest.py `one_thread`).
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(seed: int, shape: tuple[int, int] = (2, 24)) -> torch.Tensor:
    return torch.randint(0, 128, shape, generator=torch.Generator().manual_seed(seed))


def _hf_load(path: Path) -> torch.nn.Module:
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpointer_round_trip_is_exact_and_loads_in_transformers(family: str, tmp_path: Path) -> None:
    hf = build_tiny_hf(family)
    hf.save_pretrained(tmp_path / "in")
    (tmp_path / "in" / "NOTICE").write_text("licence notice\n")  # travels with every copy
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == family
    out = ckpt.save(1, loaded.model)

    assert (out / "NOTICE").read_text() == "licence notice\n"
    saved, original = load_file(out / "model.safetensors"), load_file(tmp_path / "in" / "model.safetensors")
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[k], original[k]) for k in original)
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (tmp_path / "in" / "config.json").read_text()
    )
    tokens = _tokens(0)
    with torch.no_grad():
        assert torch.equal(_hf_load(out)(tokens).logits, hf(tokens).logits)


def test_qwen3_tied_checkpoint_with_a_stored_lm_head_round_trips(tmp_path: Path) -> None:
    # Qwen3-0.6B and -1.7B tie their embeddings yet their safetensors also hold lm_head.weight (a copy):
    # ftune reads the model as tied, and writes it as save_pretrained would, without the copy.
    hf = build_tiny_hf("qwen3", tie_word_embeddings=True)
    hf.save_pretrained(tmp_path / "in")
    weights = load_file(tmp_path / "in" / "model.safetensors")
    assert "lm_head.weight" not in weights
    save_file(
        {**weights, "lm_head.weight": weights["model.embed_tokens.weight"].clone()},
        tmp_path / "in" / "model.safetensors",
    )
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out")
    loaded = ckpt.load()
    assert "output.weight" not in loaded.model
    out = ckpt.save(1, loaded.model)
    assert load_file(out / "model.safetensors").keys() == weights.keys()
    tokens = _tokens(1)
    with torch.no_grad():
        assert torch.equal(_hf_load(out)(tokens).logits, hf(tokens).logits)


def _adapted(path: Path, use_dora: bool) -> torch.nn.Module:
    model = load_hf(path).eval()
    apply_lora(model, targets=TARGETS, rank=4, alpha=8.0, use_dora=use_dora)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("lora_a.weight", "lora_b.weight")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif name.endswith("magnitude"):
                p.mul_(1 + 0.05 * torch.randn(p.shape, generator=gen))
    return model


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("use_dora", [False, True])
def test_adapter_loads_in_peft(family: str, use_dora: bool, tmp_path: Path) -> None:
    base_dir, adapter_dir = tmp_path / "base", tmp_path / "adapter"
    build_tiny_hf(family).save_pretrained(base_dir)
    model = _adapted(base_dir, use_dora)
    peft_sd = to_peft(adapter_state_dict(model), family)
    config = peft_adapter_config(
        peft_sd, rank=4, alpha=8.0, dropout=0.0, use_dora=use_dora, base_model_name_or_path=str(base_dir)
    )
    adapter_dir.mkdir()
    save_file(peft_sd, adapter_dir / "adapter_model.safetensors")
    (adapter_dir / "adapter_config.json").write_text(json.dumps(config))

    theirs = peft.PeftModel.from_pretrained(_hf_load(base_dir), adapter_dir).eval()
    loaded = peft.get_peft_model_state_dict(theirs, save_embedding_layers=False)
    assert loaded.keys() == peft_sd.keys()
    assert all(torch.equal(loaded[k], peft_sd[k]) for k in peft_sd)
    tokens = _tokens(2)
    with torch.no_grad():
        ours, reference, plain = model(tokens), theirs(tokens).logits, _hf_load(base_dir)(tokens).logits
    assert (ours - plain).abs().max() > 1e-2  # the adapter changes the logits
    assert (ours - reference).abs().max() <= 1e-4


@pytest.mark.parametrize(("family", "use_dora"), [("qwen3", True), ("gemma3", False)])  # QLoRA, QDoRA
def test_qlora_trains_only_adapters(family: str, use_dora: bool, tmp_path: Path) -> None:
    build_tiny_hf(family).save_pretrained(tmp_path)
    model = load_hf(tmp_path)
    swapped = apply_lora(model, targets=TARGETS, rank=4, alpha=8.0, use_dora=use_dora, quantize_base=True)
    assert len(swapped) == len(TARGETS) * len(model.layers)
    model.train()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    tokens, losses = _tokens(3, (1, 16)), []
    for _ in range(2):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    for name, p in model.named_parameters():
        assert p.requires_grad == any(s in name for s in ("lora_", "magnitude")), name
        assert (p.grad is not None) == p.requires_grad, name
