"""RMSNorm and RoPE against the reference implementation in `transformers`."""

import pytest
import torch

from ftune.modules import Llama3RopeScaling, RMSNorm, RotaryEmbedding
from ftune.modules.rope import rotate_half


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_transformers_bit_for_bit(dtype: torch.dtype) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    ours, ref = RMSNorm(48, eps=1e-5).to(dtype), LlamaRMSNorm(48, eps=1e-5).to(dtype)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(ours.weight)
    x = (torch.randn(2, 7, 48) * 3).to(dtype)
    assert torch.equal(ours(x), ref(x))
    assert ours(x).dtype == dtype


def _reference_inv_freq(rope_parameters: dict, head_dim: int) -> torch.Tensor:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, rope_parameters=rope_parameters)
    if rope_parameters["rope_type"] == "default":
        return 1.0 / (rope_parameters["rope_theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))
    return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](config, "cpu")[0]


@pytest.mark.parametrize("head_dim", [64, 128])
def test_llama3_scaled_frequencies_match_transformers(head_dim: int) -> None:
    scaling = Llama3RopeScaling(
        factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_seq_len=8192
    )
    ours = RotaryEmbedding(head_dim, base=500_000.0, scaling=scaling).inv_freq
    ref = _reference_inv_freq(
        dict(
            rope_type="llama3",
            rope_theta=500_000.0,
            factor=32.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
        head_dim,
    )
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
    plain = RotaryEmbedding(head_dim, base=500_000.0).inv_freq
    # All three bands occur: unchanged high frequencies, divided low ones, interpolated middle.
    assert ours[0] == plain[0] and torch.allclose(ours[-1], plain[-1] / 32)
    assert ((ours < plain) & (ours > plain / 32)).any()


def test_default_frequencies_match_transformers() -> None:
    ref = _reference_inv_freq(dict(rope_type="default", rope_theta=10_000.0), 16)
    assert torch.equal(RotaryEmbedding(16, base=10_000.0).inv_freq, ref)


def test_rotation_depends_only_on_each_tokens_own_position() -> None:
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, base=10_000.0)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 1, 6, 8)
    pos = torch.tensor([[0, 1, 2, 0, 1, 2]])  # two packed documents, positions restart
    rq, rk = rope(q, k, pos)
    first_q, first_k = rope(q[:, :, :3], k[:, :, :3], pos[:, :3])
    second_q, _ = rope(q[:, :, 3:], k[:, :, 3:], pos[:, :3])
    assert torch.equal(rq[:, :, :3], first_q) and torch.equal(rk[:, :, :3], first_k)
    assert torch.equal(rq[:, :, 3:], second_q)
    assert torch.equal(rq[:, :, 0], q[:, :, 0])  # position 0 is the identity
    assert torch.equal(rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([-3.0, -4.0, 1.0, 2.0]))


def test_frequencies_survive_meta_build_and_bf16_cast() -> None:
    with torch.device("meta"):
        rope = RotaryEmbedding(8)
    rope = rope.to(torch.bfloat16)
    assert rope.inv_freq.dtype == torch.float32 and rope.inv_freq.device.type == "cpu"
    assert "inv_freq" not in rope.state_dict()


def test_rope_argument_errors() -> None:
    with pytest.raises(ValueError, match=r"RotaryEmbedding: head_dim must be even, got 7"):
        RotaryEmbedding(7)
    with pytest.raises(
        ValueError, match=r"high_freq_factor \(1.0\) must be greater than low_freq_factor \(1.0\)"
    ):
        Llama3RopeScaling(low_freq_factor=1.0, high_freq_factor=1.0)
