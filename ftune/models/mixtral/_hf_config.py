"""Mixtral config.json -> the MoE keyword arguments of the `mixtral` component builder.

The shared reader (`ftune.models._hf_config.builder_kwargs`) gives the dense ones (widths, heads,
RoPE, norms, window; `intermediate_size` is each expert's width). A key config.json leaves out
takes transformers' `MixtralConfig` default, as transformers does when it loads the folder:
8 experts, top 2, router_aux_loss_coef 0.001, router_jitter_noise 0.
"""

from typing import Any

# transformers 5.24's MixtralConfig defaults for the MoE keys.
HF_DEFAULTS = {
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "router_aux_loss_coef": 0.001,
    "router_jitter_noise": 0.0,
}


def mixtral_builder_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """The `mixtral` builder's MoE arguments from an HF config.json (`num_experts` is read as
    transformers' alias of `num_local_experts`)."""

    def get(key: str, *aliases: str) -> Any:
        for name in (key, *aliases):
            if config.get(name) is not None:
                return config[name]
        return HF_DEFAULTS[key]

    return {
        "num_experts": int(get("num_local_experts", "num_experts")),
        "top_k": int(get("num_experts_per_tok")),
        "aux_loss_coef": float(get("router_aux_loss_coef")),
        "jitter_noise": float(get("router_jitter_noise")),
    }
