"""Which nn.Linear layers of an ftune decoder a quantizer touches.

Only the seven projections inside decoder layers (`layers.<i>.attn.{q,k,v,o}_proj`,
`layers.<i>.mlp.{gate,up,down}_proj`) and, when asked, the top-level `output` projection.
Embeddings and anything else (LoRA's `lora_a`/`lora_b`, for instance) are never quantized.

torchao's `quantize_` stops descending at the first module its filter accepts, so a filter
that accepted a parent (a whole decoder layer) would "quantize" that parent and silently
convert nothing inside it. We therefore match exact leaf FQNs, computed up front.
"""

from __future__ import annotations

import re

from torch import nn

DECODER_LINEARS: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
OUTPUT = "output"

# An optional wrapper prefix (e.g. "_orig_mod." from torch.compile) is allowed before `layers`.
_DECODER_LINEAR_FQN = re.compile(
    r"(?:^|\.)layers\.\d+\.(?:[A-Za-z_]\w*\.)*(?:" + "|".join(DECODER_LINEARS) + r")$"
)


def is_target_fqn(fqn: str, *, include_output: bool) -> bool:
    """Whether the module at `fqn` is one a quantizer may touch (by name only, not by type)."""
    if _DECODER_LINEAR_FQN.search(fqn):
        return True
    return include_output and (fqn == OUTPUT or fqn.endswith("." + OUTPUT)) and "layers." not in fqn


def find_targets(model: nn.Module, module_type: type[nn.Module], *, include_output: bool) -> list[str]:
    """FQNs of the modules of exactly `module_type` (or a subclass of it) at target names.

    Args:
        model: an ftune TransformerDecoder (or a module wrapping one).
        module_type: the class to look for: nn.Linear before quantization, torchao's
            FakeQuantizedLinear before a QAT convert.
        include_output: also consider the top-level `output` projection.

    Returns:
        The matching FQNs in module order.

    Raises:
        ValueError: `include_output=True` but the model ties its output to `tok_embeddings`.
    """
    if include_output and hasattr(model, OUTPUT) and getattr(model, OUTPUT) is None:
        raise ValueError(
            f"include_output=True, but {type(model).__name__}.output is None: this model ties its output "
            "projection to tok_embeddings, and embeddings are never quantized. "
            "Set include_output=False for tied-embedding models."
        )
    return [
        fqn
        for fqn, module in model.named_modules()
        if isinstance(module, module_type) and is_target_fqn(fqn, include_output=include_output)
    ]


def describe_linears(model: nn.Module) -> str:
    """A short list of the model's nn.Linear FQNs, for error messages."""
    names = [fqn for fqn, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        return "the model has no nn.Linear at all"
    shown = ", ".join(names[:8]) + (f", ... ({len(names)} in total)" if len(names) > 8 else "")
    return f"its nn.Linear modules are: {shown}"
