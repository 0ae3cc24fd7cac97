"""torchtune 0.6.1's own keys of Llama 3.2 Vision read into ftune: a tiny model converted by torchtune's
`llama3_vision_hf_to_tune` (tests/assets/llama3_2_vision_torchtune.pt, written by
tests/assets/make_llama3_2_vision_torchtune.py) gives ftune the tensors transformers has for the same
model (the tile embeddings as torchtune's `llama3_vision_tune_to_hf` gives them back), and the same
logits; ftune's keys go back to torchtune's bit-exactly."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import max_diff, randomise

from ftune.models.llama3_2_vision import CONVERTER, ftune_to_torchtune, llama3_2_vision, torchtune_to_ftune

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

ASSET = Path(__file__).parents[1] / "assets" / "llama3_2_vision_torchtune.pt"
HEADS = {"num_heads": 4, "num_kv_heads": 2}


def tiny_mllama() -> torch.nn.Module:
    """The tiny random MllamaForConditionalGeneration the asset was converted from."""
    config = transformers.MllamaConfig(
        vision_config=dict(
            hidden_size=8,
            num_hidden_layers=2,
            num_global_layers=1,
            attention_heads=2,
            intermediate_size=12,
            vision_output_dim=16,
            image_size=8,
            patch_size=4,
            max_num_tiles=4,
            intermediate_layers_indices=[0],
        ),
        text_config=dict(
            vocab_size=32,
            hidden_size=16,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=24,
            cross_attention_layers=[1],
            max_position_embeddings=64,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=2,
        ),
        image_token_index=32,
    )
    return randomise(transformers.MllamaForConditionalGeneration(config), 0)


@pytest.fixture(scope="module")
def asset() -> dict:
    return torch.load(ASSET, weights_only=True)


def test_torchtunes_keys_give_transformers_tensors(asset) -> None:
    hf = tiny_mllama()
    reference = {**hf.state_dict(), **{"model." + k: v for k, v in asset["hf_tiles"].items()}}
    expected = CONVERTER.hf_to_ftune(reference)
    got = torchtune_to_ftune(asset["tune"], cross_attention_layers=[1], **HEADS)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected), [
        k for k in expected if not torch.equal(got[k], expected[k])
    ]


def test_a_model_read_from_torchtune_keys_has_transformers_logits(asset) -> None:
    hf = tiny_mllama()
    hf.load_state_dict({**hf.state_dict(), **{"model." + k: v for k, v in asset["hf_tiles"].items()}})
    model = llama3_2_vision(
        vocab_size=32, num_layers=3, num_heads=4, num_kv_heads=2, embed_dim=16, intermediate_dim=24,
        max_seq_len=64, cross_attention_layers=[1], image_size=8, patch_size=4, vision_embed_dim=8,
        vision_num_layers=2, vision_num_global_layers=1, vision_num_heads=2, vision_intermediate_dim=12,
        vision_intermediate_layers=[0], image_token_id=32, scale_factor=1.0,
    ).eval()  # fmt: skip
    model.load_state_dict(torchtune_to_ftune(asset["tune"], cross_attention_layers=[1], **HEADS))
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 30, (1, 44), generator=g)
    tokens[0, 2] = 32
    pixels = torch.rand(1, 4, 3, 8, 8, generator=g)
    ratio, tiles = torch.tensor([6]), torch.ones(1, 4, dtype=torch.long)  # 2 x 2 tiles
    cam = torch.zeros(1, 44, 1, 4, dtype=torch.long)
    cam[0, 2:] = 1
    with torch.no_grad():
        theirs = hf(
            input_ids=tokens, pixel_values=pixels[None], aspect_ratio_ids=ratio[None], aspect_ratio_mask=tiles[None],
            cross_attention_mask=cam,
        ).logits  # fmt: skip
        ours = model(
            tokens, pixels, aspect_ratio_ids=ratio, aspect_ratio_mask=tiles, cross_attention_mask=cam
        )
    assert max_diff(ours, theirs) <= 1e-4


def test_ftune_keys_go_back_to_torchtunes_bit_exactly(asset) -> None:
    ours = torchtune_to_ftune(asset["tune"], cross_attention_layers=[1], **HEADS)
    back = ftune_to_torchtune(ours, vocab_size=32, **HEADS)
    assert back.keys() == asset["tune"].keys()
    assert all(torch.equal(back[k], v) for k, v in asset["tune"].items())


def test_unknown_torchtune_key_is_an_error(asset) -> None:
    bad = {**asset["tune"], "decoder.layers.0.attn.extra.weight": torch.zeros(1)}
    with pytest.raises(KeyError, match="'decoder.layers.0.attn.extra.weight' in a torchtune state dict"):
        torchtune_to_ftune(bad, cross_attention_layers=[1], **HEADS)
