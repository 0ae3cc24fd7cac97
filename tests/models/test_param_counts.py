"""Every published model builder has exactly the parameter count of the published checkpoint."""

import pytest
import torch

import ftune.models as models

# Parameter counts of the published HF checkpoints (safetensors totals; tied embeddings counted once).
PUBLISHED = {
    "llama2_7b": 6_738_415_616,
    "llama2_13b": 13_015_864_320,
    "llama2_70b": 68_976_648_192,
    "llama3_8b": 8_030_261_248,
    "llama3_70b": 70_553_706_496,
    "llama3_1_8b": 8_030_261_248,
    "llama3_1_70b": 70_553_706_496,
    "llama3_1_405b": 405_853_388_800,
    "llama3_2_1b": 1_235_814_400,
    "llama3_2_3b": 3_212_749_824,
    "qwen2_5_0_5b": 494_032_768,
    "qwen2_5_1_5b": 1_543_714_304,
    "qwen2_5_3b": 3_085_938_688,
    "qwen2_5_7b": 7_615_616_512,
    "qwen2_5_14b": 14_770_033_664,
    "qwen2_5_32b": 32_763_876_352,
    "qwen2_5_72b": 72_706_203_648,
    # Qwen2 (safetensors totals of Qwen/Qwen2-0.5B, -1.5B, -7B, -72B): Qwen2.5 kept these four sizes.
    "qwen2_0_5b": 494_032_768,
    "qwen2_1_5b": 1_543_714_304,
    "qwen2_7b": 7_615_616_512,
    "qwen2_72b": 72_706_203_648,
    # Phi-3-mini-4k, Phi-3-medium-4k and Phi-4 (Phi3ForCausalLM, untied): the sizes of their config.json
    # counted out (the hub rounds them to 3.82B, 14B and 14.7B).
    "phi3_3_8b": 3_821_079_552,
    "phi3_14b": 13_960_238_080,
    "phi4_14b": 14_659_507_200,
    # Gemma (first generation; safetensors totals of google/gemma-2b and gemma-7b, tied embeddings).
    "gemma_2b": 2_506_172_416,
    "gemma_7b": 8_537_680_896,
    # Gemma 2 (safetensors totals of google/gemma-2-2b, -9b and -27b, tied embeddings).
    "gemma2_2b": 2_614_341_888,
    "gemma2_9b": 9_241_705_984,
    "gemma2_27b": 27_227_128_320,
    # Code Llama (safetensors totals of codellama/CodeLlama-{7,13,34,70}b-hf): Llama 2 + 16 infilling tokens
    # (34B: none, and GQA).
    "code_llama2_7b": 6_738_546_688,
    "code_llama2_13b": 13_016_028_160,
    "code_llama2_34b": 33_743_970_304,
    "code_llama2_70b": 68_976_910_336,
    "mistral_7b": 7_241_732_096,
    "smollm2_135m": 134_515_008,
    "smollm2_360m": 361_821_120,
    "smollm2_1_7b": 1_711_376_384,
    # Qwen3: the 0.6B and 1.7B safetensors also store the tied lm_head (HF's pages show 751,632,384
    # and 2,031,739,904); counted once here, like every tied model in this table.
    "qwen3_0_6b": 596_049_920,
    "qwen3_1_7b": 1_720_574_976,
    "qwen3_4b": 4_022_468_096,
    "qwen3_8b": 8_190_735_360,
    "qwen3_14b": 14_768_307_200,
    "qwen3_32b": 32_762_123_264,
    # Gemma 3: 4B/12B/27B are image-text releases (4,300,079,472 / 12,187,325,040 / 27,432,406,640);
    # their text decoders are these totals minus the 416,866,032-parameter SigLIP tower and the
    # projector (1152 x hidden_size + a 1152-wide norm).
    "gemma3_270m": 268_098_176,
    "gemma3_1b": 999_885_952,
    "gemma3_4b": 3_880_263_168,
    "gemma3_12b": 11_766_034_176,
    "gemma3_27b": 27_009_346_304,
    # Qwen3-MoE (safetensors totals of Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B); the active counts
    # (3,353,032,704 and 22,190,763,520) are checked in tests/models/test_qwen3_moe_convert.py.
    "qwen3_moe_30b_a3b": 30_532_122_624,
    "qwen3_moe_235b_a22b": 235_093_634_560,
    # Mixtral (config.json shapes of mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1 counted out:
    # "46.7B" and "141B"); the active counts are checked in tests/models/test_mixtral_convert.py.
    "mixtral_8x7b": 46_702_792_704,
    "mixtral_8x22b": 140_630_071_296,
}


def _model_builders() -> list[str]:
    names = []
    for family in models.FAMILIES:
        module = getattr(models, family)
        names += [n for n in module.__all__ if n.startswith(family + "_") and n[len(family) + 1].isdigit()]
    return names


def test_every_model_builder_is_checked() -> None:
    assert sorted(_model_builders()) == sorted(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name: str) -> None:
    family = next(f for f in sorted(models.FAMILIES, key=len, reverse=True) if name.startswith(f + "_"))
    with torch.device("meta"):
        model = getattr(getattr(models, family), name)()
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[name]
