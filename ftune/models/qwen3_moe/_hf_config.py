"""Qwen3-MoE config.json -> the MoE keyword arguments of the `qwen3_moe` component builder.

The shared reader (`ftune.models._hf_config.builder_kwargs`) gives the dense ones (widths, heads,
RoPE, norms). A key config.json leaves out takes transformers' `Qwen3MoeConfig` default, as
transformers does when it loads the folder: norm_topk_prob false, router_aux_loss_coef 0.001,
decoder_sparse_step 1, mlp_only_layers []. transformers 5 writes `num_local_experts` where the
published files say `num_experts`: both are read.
"""

from typing import Any

# transformers 5.24's Qwen3MoeConfig defaults for the optional keys.
HF_DEFAULTS = {"norm_topk_prob": False, "router_aux_loss_coef": 0.001, "decoder_sparse_step": 1}


def _require(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    raise ValueError(
        f"Qwen3-MoE config.json is missing {' / '.join(repr(k) for k in keys)}, which ftune needs to "
        "size the experts; copy the model's own config.json into the folder."
    )


def qwen3_moe_builder_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """The `qwen3_moe` builder's MoE arguments from an HF config.json.

    Raises:
        ValueError: a required MoE key is missing.
    """
    return {
        "moe_intermediate_dim": _require(config, "moe_intermediate_size"),
        "num_experts": _require(config, "num_experts", "num_local_experts"),
        "top_k": _require(config, "num_experts_per_tok"),
        "norm_topk_prob": bool(config.get("norm_topk_prob", HF_DEFAULTS["norm_topk_prob"])),
        "aux_loss_coef": float(config.get("router_aux_loss_coef", HF_DEFAULTS["router_aux_loss_coef"])),
        "decoder_sparse_step": int(config.get("decoder_sparse_step", HF_DEFAULTS["decoder_sparse_step"])),
        "mlp_only_layers": tuple(config.get("mlp_only_layers") or ()),
    }
