"""Image-text checkpoints read whole (`HFCheckpointer(image_text=True)`): a tiny Gemma 3, a tiny
SmolVLM (Idefics3) and a tiny LLaVA (SmolLM2 + SigLIP) written by transformers' save_pretrained load into an `ImageTextModel` with
transformers' logits; ftune's step folders load back into transformers with equal logits, and its
LoRA adapters (text decoder, projector and vision encoder) into peft on transformers' model."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import (
    IMAGE_TOKEN,
    SIGLIP_TINY,
    layout,
    max_diff,
    pixels,
    tiny_gemma3_vlm,
    tiny_idefics3,
    tiny_llama_text_config,
    tiny_llava,
)
from omegaconf import OmegaConf
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer, build_model, load_hf
from ftune.cli.lora_targets import lora_target_problems
from ftune.config.loading import Config
from ftune.modules.vision import ImageTextModel
from ftune.peft import apply_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = SIGLIP_TINY["image_size"]
ROWS = [
    [("text", 9), ("image", 1), ("text", 33)],
    [("text", 5), ("image", 1), ("text", 4), ("image", 1), ("text", 15)],
]
BUILDERS = {"gemma3": tiny_gemma3_vlm, "smolvlm": tiny_idefics3, "llava": tiny_llava}
FAMILIES = {"gemma3": "gemma3_vision", "smolvlm": "smolvlm", "llava": "llava_smollm2"}
TOKENS = {"gemma3": 16, "smolvlm": 16, "llava": 64}  # image tokens an image
PROJECTOR = {"smolvlm": ["proj"], "llava": ["linear_1", "linear_2"]}  # Gemma 3's has no linear layer


def _logits(hf: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor, kind: str) -> torch.Tensor:
    """transformers' logits: Gemma 3 takes the images flat (and which tokens are images, for their
    bidirectional attention), Idefics3 (batch, max images, ...) padded."""
    if kind == "gemma3":
        with torch.no_grad():
            return hf(
                input_ids=tokens, pixel_values=images, token_type_ids=(tokens == IMAGE_TOKEN).long()
            ).logits
    if kind == "smolvlm":
        padded = torch.zeros(2, 2, *images.shape[1:])
        padded[0, :1], padded[1, :2] = images[:1], images[1:]
        images = padded
    with torch.no_grad():
        return hf(input_ids=tokens, pixel_values=images).logits


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def saved(request, tmp_path_factory) -> tuple[str, torch.nn.Module, Path]:
    """(kind, the transformers model, the folder its save_pretrained wrote)."""
    kind = request.param
    hf = BUILDERS[kind](seed=0)
    folder = tmp_path_factory.mktemp(kind) / "in"
    hf.save_pretrained(folder)
    return kind, hf, folder


def _inputs(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """ROWS (row 0's last text longer by one image's extra tokens, so that the rows are equally long)."""
    rows = [[*ROWS[0][:2], ("text", 33 + TOKENS[kind] - 16)], ROWS[1]]
    return layout(rows, TOKENS[kind], seed=1), pixels(3, SIZE, seed=2)


def test_loads_whole_with_transformers_logits(saved) -> None:
    kind, hf, folder = saved
    model = load_hf(folder, image_text=True).eval()
    assert isinstance(model, ImageTextModel)
    assert HFCheckpointer(folder, image_text=True).load().family == FAMILIES[kind]
    tokens, images = _inputs(kind)
    with torch.no_grad():
        got = model(tokens, images)
    assert max_diff(got, _logits(hf, tokens, images, kind)) <= 1e-4


def test_transformers_loads_the_saved_step_with_equal_logits(saved, tmp_path: Path) -> None:
    kind, hf, folder = saved
    ckpt = HFCheckpointer(folder, tmp_path / "out", image_text=True)
    model = build_model(None, ckpt.load().model, device="cpu", dtype=torch.float32, checkpoint_dir=folder)
    with torch.no_grad():  # trained weights differ from the input's
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    step = ckpt.save(1, model.state_dict())
    assert json.loads((step / "config.json").read_text()) == json.loads((folder / "config.json").read_text())
    assert load_file(step / "model.safetensors").keys() == load_file(folder / "model.safetensors").keys()
    back = type(hf).from_pretrained(step).float().eval()
    tokens, images = _inputs(kind)
    with torch.no_grad():
        ours = model.eval()(tokens, images)
    assert max_diff(ours, _logits(back, tokens, images, kind)) <= 1e-4


def test_peft_loads_the_lora_adapters_with_equal_logits(saved, tmp_path: Path) -> None:
    kind, hf, folder = saved
    ckpt = HFCheckpointer(folder, tmp_path / "out", image_text=True, save_adapter_weights_only=False)
    model = build_model(None, ckpt.load().model, device="cpu", dtype=torch.float32, checkpoint_dir=folder)
    settings = {"rank": 2, "alpha": 4.0, "dropout": 0.0, "use_dora": False}
    # Adapters in every part that has linear layers (Gemma 3's projector has none).
    targets = {"decoder": ["q_proj", "v_proj"], "vision_encoder": ["q_proj", "fc1"]}
    if kind in PROJECTOR:
        targets["projector"] = PROJECTOR[kind]
    swapped = apply_lora(model, targets=targets, **settings)
    assert {s.split(".")[0] for s in swapped} == set(targets)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_(0.0, 0.1)
    step = ckpt.save(1, model.state_dict(), adapter_config=settings)
    adapted = peft.PeftModel.from_pretrained(BUILDERS[kind](seed=0), step).eval()
    tokens, images = _inputs(kind)
    with torch.no_grad():
        ours = model.eval()(tokens, images)
    theirs = _logits(adapted, tokens, images, kind)
    assert max_diff(ours, theirs) <= 1e-4
    assert max_diff(theirs, _logits(hf, tokens, images, kind)) > 1e-3  # the adapters change the logits
    merged = type(hf).from_pretrained(step / "merged").float().eval()  # the whole model, adapters folded in
    assert max_diff(ours, _logits(merged, tokens, images, kind)) <= 1e-4
    resumed = HFCheckpointer(folder, tmp_path / "out", image_text=True, resume_from_checkpoint="auto").load()
    adapter = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert resumed.adapter.keys() == adapter.keys()
    assert all(torch.equal(resumed.adapter[k], v) for k, v in adapter.items())


def test_an_image_text_checkpoint_needs_image_text_true(saved) -> None:
    kind, _, folder = saved
    if kind == "gemma3":  # read as text only, as before, into a text decoder
        state = HFCheckpointer(folder).load().model
        assert not any(k.startswith("vision_encoder.") for k in state)
        return
    with pytest.raises(ValueError, match="ftune reads whole only: set checkpointer.image_text=true"):
        HFCheckpointer(folder).load()


def test_image_text_true_on_a_text_checkpoint_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "text"
    config = transformers.LlamaConfig(**tiny_llama_text_config())
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    with pytest.raises(ValueError, match="checkpointer.image_text=true, but .* describes a text model"):
        HFCheckpointer(folder, image_text=True).load()


def test_a_text_model_section_on_a_whole_read_is_an_error(saved) -> None:
    kind, _, folder = saved
    state = HFCheckpointer(folder, image_text=True).load().model
    model = {"_component_": "ftune.models.smollm2.smollm2_135m"}
    with pytest.raises(
        ValueError, match="the model section builds a TransformerDecoder. Name the image-text"
    ):
        build_model(model, state, device="cpu", dtype=torch.float32)


def test_validate_checks_per_part_targets_on_the_whole_model(saved) -> None:
    # `ftune validate` builds the model config.json describes on the meta device, whole when the
    # checkpointer says image_text=true, and checks per-part targets as apply_lora does.
    kind, _, folder = saved

    def problems(targets: dict) -> list[str]:
        node = OmegaConf.create(
            {
                "checkpointer": {"checkpoint_dir": str(folder), "image_text": True},
                "peft": {"_component_": "ftune.peft.apply_lora", "targets": targets},
            }
        )
        return lora_target_problems(Config(node, source="cfg.yaml"))

    assert problems({"decoder": ["q_proj"], "vision_encoder": ["fc1"]}) == []
    (problem,) = problems({"decoder": ["q_proj"], "vision_encoder": ["qproj"]})
    assert "targets ['qproj'] match no nn.Linear in SiglipVisionEncoder" in problem
    assert "Fix peft.targets.vision_encoder" in problem
