"""Gemma 2 state-dict converters (pure: dict in, dict out).

Gemma 3's table without the q/k norms: the four norms a layer take HF names that differ from the
llama-style ones (`post_attention_layernorm` is the norm *on* the attention output, ftune
`post_attn_norm`; the norm before the feed-forward is `pre_feedforward_layernorm`, ftune `mlp_norm`).
"""

from ftune.models._table_converter import table_converter

HF_TABLE: dict[str, str] = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{}.input_layernorm.weight": "layers.{}.attn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight": "layers.{}.post_attn_norm.weight",
    "model.layers.{}.pre_feedforward_layernorm.weight": "layers.{}.mlp_norm.weight",
    "model.layers.{}.post_feedforward_layernorm.weight": "layers.{}.post_mlp_norm.weight",
    "model.layers.{}.self_attn.q_proj.weight": "layers.{}.attn.q_proj.weight",
    "model.layers.{}.self_attn.k_proj.weight": "layers.{}.attn.k_proj.weight",
    "model.layers.{}.self_attn.v_proj.weight": "layers.{}.attn.v_proj.weight",
    "model.layers.{}.self_attn.o_proj.weight": "layers.{}.attn.o_proj.weight",
    "model.layers.{}.mlp.gate_proj.weight": "layers.{}.mlp.gate_proj.weight",
    "model.layers.{}.mlp.up_proj.weight": "layers.{}.mlp.up_proj.weight",
    "model.layers.{}.mlp.down_proj.weight": "layers.{}.mlp.down_proj.weight",
}
CONVERTER = table_converter("gemma2", HF_TABLE)

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
