"""Code Llama model builders: the published sizes, nothing else.

Every size has RoPE base 1,000,000 and a 16,384-position context (torchtune's builders kept Llama 2's
base of 10,000, which the weights were not trained with). The Python and Instruct variants share
these numbers.
"""

from ftune.models.llama2._component_builders import llama2
from ftune.modules.transformer import TransformerDecoder

_CODE = dict(max_seq_len=16_384, rope_base=1_000_000.0)


def code_llama2_7b() -> TransformerDecoder:
    """CodeLlama-7b(-hf), with the sizes of its published config.json."""
    return llama2(
        vocab_size=32_016,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        embed_dim=4096,
        intermediate_dim=11_008,
        **_CODE,
    )


def code_llama2_13b() -> TransformerDecoder:
    """CodeLlama-13b(-hf), with the sizes of its published config.json."""
    return llama2(
        vocab_size=32_016,
        num_layers=40,
        num_heads=40,
        num_kv_heads=40,
        embed_dim=5120,
        intermediate_dim=13_824,
        **_CODE,
    )


def code_llama2_34b() -> TransformerDecoder:
    """CodeLlama-34b(-hf), with the sizes of its published config.json (GQA; no infilling tokens)."""
    return llama2(
        vocab_size=32_000,
        num_layers=48,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=22_016,
        **_CODE,
    )


def code_llama2_70b() -> TransformerDecoder:
    """CodeLlama-70b(-hf), with the sizes of its published config.json."""
    return llama2(
        vocab_size=32_016,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=28_672,
        **_CODE,
    )
