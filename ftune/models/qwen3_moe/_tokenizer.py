"""Qwen3-MoE tokenizer: Qwen3's (the same tokenizer.json and chat template)."""

from ftune.models.qwen3._tokenizer import qwen3_tokenizer

qwen3_moe_tokenizer = qwen3_tokenizer
