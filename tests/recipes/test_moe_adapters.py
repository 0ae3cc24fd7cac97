"""Expert adapters through the checkpointer: a LoRA run of a tiny Qwen3-MoE saves its expert
adapters in PEFT's format (peft loads the step folder onto transformers' model with the logits of
ftune's trained model), resumes them exactly, and its merged save holds the merged expert weights
(transformers loads it with the same logits), as does the merge on load of generate/eval/export."""

import json

import features  # tests/recipes
import pytest
import torch
from safetensors.torch import load_file
from test_moe_recipes import LORA, SIZES, make_tiny_moe, moe_overrides  # tests/recipes

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.checkpointing.inference import load_inference_model
from ftune.peft import apply_lora, from_peft

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

CONFIG = "smollm2/135M_lora"
TRAIN = ["optimizer.lr=3e-3", "lr_scheduler.num_warmup_steps=0"]  # the adapters move in 3 steps


@pytest.fixture(scope="module")
def moe_checkpoint(tiny_checkpoint, tmp_path_factory):
    return make_tiny_moe(tmp_path_factory.mktemp("moe") / "ckpt", tiny_checkpoint)


@pytest.fixture
def run_moe(run_recipe, moe_checkpoint):
    def run(*overrides, output_dir):
        return run_recipe(
            "lora_finetune_single_device",
            CONFIG,
            *moe_overrides(moe_checkpoint),
            *LORA,
            *TRAIN,
            *overrides,
            output_dir=output_dir,
        )

    return run


def _tokens():
    return torch.randint(0, SIZES["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(0))


def test_step_folder_holds_expert_adapters_that_peft_loads(run_moe, moe_checkpoint, tmp_path):
    _, out = run_moe("max_steps=3", "checkpointer.save_adapter_weights_only=false", output_dir=tmp_path / "o")
    step = out / "step_3"
    saved = load_file(step / "adapter_model.safetensors")
    experts = sorted(k for k in saved if ".mlp.experts." in k)
    assert experts == sorted(
        f"base_model.model.model.layers.{i}.mlp.experts.{inner}lora_{ab}.weight"
        for i in range(2)
        for inner in ("", "base_layer.")
        for ab in "AB"
    )
    config = json.loads((step / "adapter_config.json").read_text())
    assert config["target_parameters"] == ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    assert sorted(config["target_modules"]) == ["q_proj", "v_proj"] and config["rank_pattern"] == {}

    ours = load_hf(moe_checkpoint).eval()
    apply_lora(ours, targets=["q_proj", "v_proj", "experts"], rank=config["r"], alpha=config["lora_alpha"])
    shapes = {k: v.shape for k, v in ours.state_dict().items()}
    adapter = from_peft(saved, "qwen3_moe", shapes)
    assert sum(".experts.lora." in k for k in adapter) == 8
    missing, unexpected = ours.load_state_dict(adapter, strict=False)
    assert not unexpected and all(".lora_" not in k for k in missing)
    trained = ours.layers[0].mlp.experts.lora.down_proj.lora_b.weight
    assert trained.abs().sum() > 0  # the expert adapters trained (B starts at zero)

    base = transformers.AutoModelForCausalLM.from_pretrained(moe_checkpoint, dtype=torch.float32).eval()
    theirs = peft.PeftModel.from_pretrained(base, step).eval()
    tokens = _tokens()
    with torch.no_grad():
        got, want = ours(tokens), theirs(tokens).logits
        with theirs.disable_adapter():
            untrained = theirs(tokens).logits
    assert (got - want).abs().max() <= 1e-4
    assert (want - untrained).abs().max() > 1e-3  # the adapters change the logits

    # The merged save: the expert updates folded into the stacked weights, which transformers loads.
    merged = transformers.AutoModelForCausalLM.from_pretrained(step / "merged", dtype=torch.float32).eval()
    # generate / eval / export merge the step folder on load (adapter_dir): the same model.
    cpu = torch.device("cpu")
    served = load_inference_model(
        HFCheckpointer(moe_checkpoint), adapter_dir=step, device=cpu, dtype=torch.float32
    )
    with torch.no_grad():
        assert (merged(tokens).logits - want).abs().max() <= 1e-4
        assert (served(tokens) - want).abs().max() <= 1e-4


def test_resume_restores_the_expert_adapters_exactly(run_moe, tmp_path):
    features.resume(run_moe, tmp_path)  # equal losses, and bit-equal adapter files after resume
    first = load_file(tmp_path / "b" / "step_2" / "adapter_model.safetensors")
    final = load_file(tmp_path / "b" / "step_3" / "adapter_model.safetensors")
    key = "base_model.model.model.layers.1.mlp.experts.lora_B.weight"
    assert not torch.equal(first[key], final[key])  # the step after the resume moved them
