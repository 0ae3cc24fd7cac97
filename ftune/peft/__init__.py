"""Parameter-efficient fine-tuning: LoRA, DoRA and QLoRA layer swaps, adapter state dicts,
and conversion to / from Hugging Face PEFT's adapter format."""

from ftune.peft.adapter_state import ADAPTER_SUFFIXES, adapter_layers, adapter_state_dict, is_adapter_key
from ftune.peft.apply import LORA_TARGETS, apply_lora, trainable_params
from ftune.peft.disable import adapters_disabled
from ftune.peft.dora import DoRALinear
from ftune.peft.lora import LoRALinear
from ftune.peft.parts import PARTS, train_parts
from ftune.peft.peft_format import from_peft, peft_adapter_config, to_peft

__all__ = [
    "ADAPTER_SUFFIXES",
    "LORA_TARGETS",
    "PARTS",
    "DoRALinear",
    "LoRALinear",
    "adapter_layers",
    "adapters_disabled",
    "adapter_state_dict",
    "apply_lora",
    "from_peft",
    "is_adapter_key",
    "peft_adapter_config",
    "to_peft",
    "trainable_params",
    "train_parts",
]
