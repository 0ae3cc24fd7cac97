"""Data pipeline: messages, record transforms, collate, packing, and the stateful loader."""

from ftune.data.collate import (
    CROSS_ENTROPY_IGNORE_IDX,
    build_collate,
    build_preference_collate,
    padded_collate_kto,
    padded_collate_packed,
    padded_collate_preference,
    padded_collate_sft,
    padding_free_collate,
    padding_free_collate_preference,
)
from ftune.data.loader import StatefulDataLoader, build_dataloader, validation_loader
from ftune.data.messages import Message
from ftune.data.packing import PackedDataset, pack_sequences
from ftune.data.prompt_batch import PromptBatch, build_prompt_collate, collate_prompts
from ftune.data.sampler import epoch_batches
from ftune.data.transforms import (
    AlpacaToMessages,
    ChosenRejectedToMessages,
    InputOutputToMessages,
    OpenAIToMessages,
    ShareGPTToMessages,
)

__all__ = [
    "CROSS_ENTROPY_IGNORE_IDX",
    "AlpacaToMessages",
    "ChosenRejectedToMessages",
    "InputOutputToMessages",
    "Message",
    "OpenAIToMessages",
    "PackedDataset",
    "PromptBatch",
    "ShareGPTToMessages",
    "StatefulDataLoader",
    "build_collate",
    "build_dataloader",
    "build_preference_collate",
    "build_prompt_collate",
    "collate_prompts",
    "epoch_batches",
    "pack_sequences",
    "padded_collate_packed",
    "padded_collate_kto",
    "padded_collate_preference",
    "padded_collate_sft",
    "padding_free_collate",
    "padding_free_collate_preference",
    "validation_loader",
]
