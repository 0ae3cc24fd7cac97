"""Pick a family from an HF config.json and build its model with the config's sizes."""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from ftune.models.gemma import gemma
from ftune.models.gemma2 import gemma2
from ftune.models.gemma2._hf_config import gemma2_builder_kwargs
from ftune.models.gemma3 import _image_text as gemma3_image_text
from ftune.models.gemma3 import gemma3
from ftune.models.gemma3._hf_config import gemma3_builder_kwargs
from ftune.models.llama2 import llama2
from ftune.models.llama3 import llama3
from ftune.models.llama3_1 import llama3_1
from ftune.models.llama3_2 import llama3_2
from ftune.models.mistral import mistral
from ftune.models.mixtral import mixtral
from ftune.models.mixtral._hf_config import mixtral_builder_kwargs
from ftune.models.phi3 import phi3
from ftune.models.qwen2 import qwen2
from ftune.models.qwen2_5 import qwen2_5
from ftune.models.qwen3 import qwen3
from ftune.models.qwen3_moe import qwen3_moe
from ftune.models.qwen3_moe._hf_config import qwen3_moe_builder_kwargs
from ftune.models.smollm2 import smollm2
from ftune.modules.transformer import TransformerDecoder

logger = logging.getLogger(__name__)

COMPONENT_BUILDERS: dict[str, Callable[..., TransformerDecoder]] = {
    "llama2": llama2,
    "llama3": llama3,
    "llama3_1": llama3_1,
    "llama3_2": llama3_2,
    "qwen2_5": qwen2_5,
    "mistral": mistral,
    "smollm2": smollm2,
    "qwen3": qwen3,
    "gemma3": gemma3,
    "qwen3_moe": qwen3_moe,
    "qwen2": qwen2,
    "phi3": phi3,
    "phi4": phi3,  # Phi-4 is a Phi3ForCausalLM
    "gemma": gemma,
    "gemma2": gemma2,
    "code_llama2": llama2,  # Code Llama is Llama 2 with another RoPE base
    "mixtral": mixtral,
}
_SCALED = {"llama3_1", "llama3_2"}

# model_type -> architecture class name, for detection and for the error message.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "mixtral": "MixtralForCausalLM",
}
# model_type -> family, for the architectures that map to one family each.
_ONE_FAMILY = {
    "qwen2": "qwen2_5",
    "mistral": "mistral",
    "qwen3": "qwen3",
    "gemma3_text": "gemma3",
    "qwen3_moe": "qwen3_moe",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "mixtral": "mixtral",
}
_SUPPORTED_TEXT = (
    "LlamaForCausalLM (model_type 'llama': llama2, llama3, llama3_1, llama3_2, smollm2, code_llama2), "
    "Qwen2ForCausalLM ('qwen2': qwen2_5), MistralForCausalLM ('mistral': mistral), "
    "Qwen3ForCausalLM ('qwen3': qwen3), Qwen3MoeForCausalLM ('qwen3_moe': qwen3_moe), Gemma3ForCausalLM ('gemma3_text': gemma3), "
    "Gemma3ForConditionalGeneration ('gemma3': the gemma3 text decoder of Gemma 3 4B/12B/27B), "
    "Phi3ForCausalLM ('phi3': phi3, or phi4 for rope_theta 250000), GemmaForCausalLM ('gemma': gemma), "
    "Gemma2ForCausalLM ('gemma2': gemma2), MixtralForCausalLM ('mixtral': mixtral)"
)
# Image-text checkpoints whose text decoder ftune builds: model_type -> the module that turns their
# config.json and weights into those of the text-only model (text_only_config, split_text_decoder,
# text_decoder_key, omitted_text_keys).
IMAGE_TEXT = {gemma3_image_text.IMAGE_TEXT_MODEL_TYPE: gemma3_image_text}


def image_text_kind(config: dict[str, Any]) -> Any:
    """The `IMAGE_TEXT` entry of an image-text config.json, or None for a text model's."""
    return next((kind for kind in IMAGE_TEXT.values() if kind.is_image_text_config(config)), None)


def text_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config.json of the text model ftune builds from `config`: for an image-text checkpoint
    (Gemma 3 4B/12B/27B) that of its text decoder as a causal LM, else `config` itself."""
    kind = image_text_kind(config)
    return kind.text_only_config(config) if kind is not None else config


def _model_type(config: dict[str, Any]) -> str:
    model_type = config.get("model_type")
    if model_type in SUPPORTED_ARCHITECTURES:
        return model_type
    for arch in config.get("architectures") or []:
        for mt, name in SUPPORTED_ARCHITECTURES.items():
            if arch == name:
                return mt
    raise ValueError(
        f"Unsupported architecture: config.json has model_type={model_type!r}, "
        f"architectures={config.get('architectures')!r}. ftune supports {_SUPPORTED_TEXT}."
    )


def _rope(config: dict[str, Any]) -> tuple[float | None, str, dict[str, Any]]:
    """(rope_theta, rope_type, parameters) from either the transformers>=5 `rope_parameters` or
    the older top-level `rope_theta` + `rope_scaling` layout."""
    params = dict(config.get("rope_parameters") or {})
    params.update(config.get("rope_scaling") or {})
    theta = config.get("rope_theta", params.get("rope_theta"))
    rope_type = params.get("rope_type", params.get("type", "default"))
    return theta, rope_type, params


def family_from_hf_config(config: dict[str, Any]) -> str:
    """The ftune family whose builder and converter fit an HF config.json.

    llama + "llama3" RoPE scaling -> llama3_1 (llama3_2 if the embeddings are tied); llama without
    scaling -> smollm2 if tied, llama3 if rope_theta is 500000, code_llama2 if 1000000, else llama2;
    qwen2 -> qwen2_5;
    mistral -> mistral; qwen3 -> qwen3; gemma3_text -> gemma3, and gemma3 (image-text) -> gemma3 for
    its text decoder.

    Raises:
        ValueError: for an unsupported architecture or RoPE scaling type.
    """
    config = text_model_config(config)
    model_type = _model_type(config)
    if model_type in _ONE_FAMILY:
        return _ONE_FAMILY[model_type]
    if model_type == "phi3":
        return _phi_family(config)
    theta, rope_type, _ = _rope(config)
    tied = bool(config.get("tie_word_embeddings", False))
    if rope_type == "llama3":
        return "llama3_2" if tied else "llama3_1"
    if rope_type != "default":
        raise ValueError(
            f"Unsupported RoPE scaling: config.json has rope_type={rope_type!r}; ftune supports 'default' "
            "and 'llama3' (Llama 3.1/3.2)."
        )
    if tied:
        return "smollm2"
    if theta == 1_000_000:  # Code Llama: Llama 2's architecture, RoPE base 1M
        return "code_llama2"
    return "llama3" if theta == 500_000 else "llama2"


def _phi_family(config: dict[str, Any]) -> str:
    """phi4 for Phi-4's RoPE base 250,000 (Phi-3's 4k releases have 10,000); both are Phi3ForCausalLM.
    Only the default RoPE is built: the 128k releases' LongRoPE is refused."""
    theta, rope_type, _ = _rope(config)
    if rope_type != "default":
        raise ValueError(
            f"Unsupported RoPE scaling for Phi3ForCausalLM: config.json has rope_type={rope_type!r} (the 128k "
            "releases of Phi-3 and Phi-3.5 use LongRoPE); ftune builds the default RoPE only: use a 4k release "
            "(microsoft/Phi-3-mini-4k-instruct, Phi-3-medium-4k-instruct) or Phi-4."
        )
    return "phi4" if theta == 250_000 else "phi3"


def _require(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise ValueError(f"config.json is missing {key!r}, which ftune needs to size the model.")
    return config[key]


def _check_supported_options(config: dict[str, Any], model_type: str) -> None:
    act = config.get("hidden_act", "silu")
    if model_type == "gemma":  # GeGLU; transformers reads the releases' legacy "gelu" as the tanh GELU
        if act not in ("gelu", "gelu_pytorch_tanh") or config.get("hidden_activation") not in (
            None,
            "gelu_pytorch_tanh",
        ):
            raise ValueError(
                f"Unsupported Gemma config.json hidden_act={act!r} / hidden_activation="
                f"{config.get('hidden_activation')!r}: ftune's GeGLU uses 'gelu_pytorch_tanh'."
            )
    elif act != "silu":
        raise ValueError(f"Unsupported config.json hidden_act={act!r}: ftune's SwiGLU uses 'silu'.")
    for key in ("attention_bias", "mlp_bias"):
        if model_type != "qwen2" and config.get(key):
            raise ValueError(
                f"Unsupported config.json {key}=true for model_type {model_type!r}: ftune expects false."
            )
    _, _, params = _rope(config)
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(
            f"Unsupported config.json partial_rotary_factor={params['partial_rotary_factor']}: ftune rotates the "
            "whole head (1.0)."
        )
    window = _sliding_window(config)
    if (
        model_type not in ("mistral", "phi3", "mixtral")
        and window is not None
        and window < config.get("max_position_embeddings", 0)
    ):
        logger.warning(
            "config.json sets sliding_window=%s; ftune attends over the full causal context, which matches "
            "only for sequences of at most %s tokens.",
            window,
            window,
        )


def _sliding_window(config: dict[str, Any]) -> int | None:
    """The attention window config.json sets (Mistral: on unless use_sliding_window is false)."""
    uses_window = config.get("use_sliding_window", config.get("model_type") in ("mistral", "phi3", "mixtral"))
    return config.get("sliding_window") if uses_window else None


def builder_kwargs(config: dict[str, Any], family: str) -> dict[str, Any]:
    """Keyword arguments of `COMPONENT_BUILDERS[family]` read from an HF config.json."""
    config = text_model_config(config)
    if family == "gemma3":
        return gemma3_builder_kwargs(config)
    if family == "gemma2":
        return gemma2_builder_kwargs(config)
    num_heads = _require(config, "num_attention_heads")
    kwargs: dict[str, Any] = {
        "vocab_size": _require(config, "vocab_size"),
        "num_layers": _require(config, "num_hidden_layers"),
        "num_heads": num_heads,
        "num_kv_heads": config.get("num_key_value_heads") or num_heads,
        "embed_dim": _require(config, "hidden_size"),
        "intermediate_dim": _require(config, "intermediate_size"),
        "max_seq_len": config.get("max_position_embeddings", 2048),
        "head_dim": config.get("head_dim"),
        # transformers' default when config.json omits it: tied for Gemma (whose releases omit it).
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", family == "gemma")),
    }
    theta, _, params = _rope(config)
    if theta is not None:
        kwargs["rope_base"] = float(theta)
    if "rms_norm_eps" in config:
        kwargs["norm_eps"] = float(config["rms_norm_eps"])
    if family == "qwen3_moe":
        kwargs.update(qwen3_moe_builder_kwargs(config))
    if family == "mixtral":
        kwargs.update(mixtral_builder_kwargs(config))
    if family in ("mistral", "phi3", "phi4", "mixtral"):
        kwargs["sliding_window"] = _sliding_window(config)
    if family in _SCALED:
        for arg, key in (
            ("scale_factor", "factor"),
            ("low_freq_factor", "low_freq_factor"),
            ("high_freq_factor", "high_freq_factor"),
            ("original_max_seq_len", "original_max_position_embeddings"),
        ):
            if key not in params:
                raise ValueError(f"config.json rope scaling of type 'llama3' is missing {key!r}.")
            kwargs[arg] = params[key]
    return kwargs


@contextmanager
def _default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def model_from_hf_config(
    config: dict[str, Any],
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> tuple[str, TransformerDecoder]:
    """Build the ftune model an HF config.json describes (random weights).

    Args:
        config: the parsed config.json (of an image-text Gemma 3: its text decoder is built).
        dtype: parameter dtype (floating); None = the current default dtype.
        device: where to allocate; "meta" builds without memory, for loading with assign=True.

    Returns:
        (family, model).

    Raises:
        ValueError: for an unsupported architecture or option, or a missing size.
    """
    config = text_model_config(config)
    model_type = _model_type(config)
    if model_type not in ("gemma3_text", "gemma2"):  # their own readers check Gemma's options
        _check_supported_options(config, model_type)
    family = family_from_hf_config(config)
    kwargs = builder_kwargs(config, family)
    with _default_dtype(dtype), torch.device(device) if device is not None else nullcontext():
        model = COMPONENT_BUILDERS[family](**kwargs)
    return family, model
