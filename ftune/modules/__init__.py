"""Building blocks of ftune's decoder models, one concept a file."""

from ftune.modules.attention import GroupedQueryAttention
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.feed_forward import SwiGLU
from ftune.modules.kv_cache import KVCache
from ftune.modules.masks import causal_mask, document_causal_mask
from ftune.modules.moe import MoEFeedForward, MoETransformerDecoder
from ftune.modules.moe_experts import GroupedExperts
from ftune.modules.moe_router import TopKRouter, load_balancing_loss
from ftune.modules.rms_norm import RMSNorm
from ftune.modules.rope import Llama3RopeScaling, RotaryEmbedding
from ftune.modules.transformer import TransformerDecoder

__all__ = [
    "DecoderLayer",
    "GroupedExperts",
    "GroupedQueryAttention",
    "KVCache",
    "Llama3RopeScaling",
    "MoEFeedForward",
    "MoETransformerDecoder",
    "RMSNorm",
    "RotaryEmbedding",
    "SwiGLU",
    "TopKRouter",
    "TransformerDecoder",
    "causal_mask",
    "document_causal_mask",
    "load_balancing_loss",
]
