"""torchtune's Llama 3.2 Vision configs: the rules their model, tokenizer and collate keys need.

torchtune's builders say which parts train: `decoder_trainable`, `encoder_trainable` and
`fusion_trainable` (the cross-attention layers, the encoder's global transformer and the projector),
booleans for the full builders and "frozen"/"lora" for the LoRA ones. The full builders' become the
same arguments of ftune's (`ftune.models.llama3_2_vision.llama3_2_vision_11b`); the LoRA builders'
become per-part LoRA targets: leaf names in ftune, so a "lora" fusion adapts the decoder's
self-attention layers as well as its cross-attention ones.
"""

from __future__ import annotations

from typing import Any

import ftune.torchtune.table as table
from ftune.torchtune.conversion import Converter

FAMILY = "llama3_2_vision"
TRAINABLE = ("decoder_trainable", "encoder_trainable", "fusion_trainable")
IMAGE_SIZE = 560  # the published checkpoints' tile size, ftune's builders' and the mllama transform's
COLLATE = "torchtune.data.padded_collate_tiled_images_and_mask"
_ENCODER_MLP = ("fc1", "fc2")
_PARTS_NOTE = (
    "per-part LoRA targets: ftune's are leaf names, so a 'lora' fusion adapts the decoder's self-attention "
    "layers as well as its cross-attention ones"
)


def _image_size(c: Converter, key: str, value: Any) -> None:
    if value == IMAGE_SIZE:
        c.note(key, "covered", f"{IMAGE_SIZE} px tiles: ftune's builder and the mllama image transform")
    else:
        c.note(key, "unsupported", f"{value}: ftune's Llama 3.2 Vision builders take {IMAGE_SIZE} px tiles")


def convert_model(c: Converter, node: dict[str, Any], base: str, lora: bool) -> None:
    """The model section of a Llama 3.2 Vision config (its component already set) and its peft section."""
    c.set("checkpointer.image_text", True)
    if not lora:
        for key, value in node.items():
            if key in TRAINABLE:
                c.set(f"model.{key}", bool(value))
                c.note(f"model.{key}", "mapped", f"model.{key} (the builder freezes the part when false)")
            elif key == "image_size":
                _image_size(c, f"model.{key}", value)
            elif key != "_component_":
                c.note(f"model.{key}", "unsupported", f"no argument {key} of ftune.models.{FAMILY}.{base}")
        return
    modes = {k: str(node.get(k, "frozen")).lower() for k in TRAINABLE}
    attn = [table.LORA_ATTN_MODULES[m] for m in node.get("lora_attn_modules", [])]
    mlp = bool(node.get("apply_lora_to_mlp", False))
    targets: dict[str, list[str]] = {}
    if "lora" in (modes["decoder_trainable"], modes["fusion_trainable"]):
        targets["decoder"] = attn + (list(table.LORA_MLP) if mlp else [])
        targets["decoder"] += ["output"] if node.get("apply_lora_to_output") else []
    if modes["fusion_trainable"] == "lora":
        targets["projector"] = ["proj"]
    if modes["encoder_trainable"] == "lora":
        targets["vision_encoder"] = attn + (list(_ENCODER_MLP) if mlp else [])
    peft: dict[str, Any] = {"_component_": "ftune.peft.apply_lora", "targets": targets}
    for key, value in node.items():
        path = f"model.{key}"
        if key == "_component_":
            continue
        if key in TRAINABLE:
            if modes[key] in ("frozen", "lora"):
                c.note(path, "mapped", f"{value}: {_PARTS_NOTE}")
            else:
                c.note(path, "unsupported", f"{value}: a LoRA config adapts or freezes each part")
        elif key in ("lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output"):
            c.note(
                path,
                "mapped",
                "peft.targets of each adapted part (output_proj is o_proj; the encoder's MLP fc1, fc2)",
            )
        elif key in table.LORA_ARGS:
            peft[table.LORA_ARGS[key]] = value
            c.note(path, "mapped", f"peft.{table.LORA_ARGS[key]}")
        elif key == "image_size":
            _image_size(c, path, value)
        else:
            c.note(path, "unsupported", f"no ftune.peft.apply_lora argument for {key}")
    peft.setdefault("dropout", 0.0)
    peft.setdefault("use_dora", False)
    peft["quantize_base"] = bool(peft.get("quantize_base", False)) or c.tt["model"]["_component_"].rsplit(
        ".", 1
    )[-1].startswith("qlora_")
    c.out["peft"] = peft


def _image_prompt(c: Converter, user: dict[str, Any]) -> None:
    """torchtune's ``prompt.user: {image: <path or URL>, text: ...}`` -> generate's prompt and images."""
    if set(user) - {"image", "text"}:
        c.note(
            "prompt.user",
            "unsupported",
            f"keys {sorted(set(user) - {'image', 'text'})}: torchtune's take image, text",
        )
        return
    if "text" in user:
        c.out["prompt"] = user["text"]
    if "image" in user:
        c.out["images"] = [user["image"]]
    c.note(
        "prompt.user",
        "mapped",
        "prompt (its text) and images (its image, shown before the text as in torchtune's generate_v2; ftune "
        "reads local files only, so a URL is refused at run time: download it and give its path)",
    )


def convert_special(c: Converter, key: str, value: Any) -> bool:
    """The top-level keys only Llama 3.2 Vision's configs have; False for any other."""
    if key == "prompt" and isinstance(value, dict) and isinstance(value.get("user"), dict):
        for sub, v in value.items():
            if sub == "system":
                c.out["system"] = v
                c.note("prompt.system", "mapped", "system")
            elif sub == "user":
                _image_prompt(c, v)
            else:
                c.note(f"prompt.{sub}", "unsupported", "torchtune's prompt has system and user only")
        return True
    if key == "collate_fn" and value == COLLATE:
        c.note(
            key,
            "covered",
            "ftune collates image datasets with padded_collate_vision (tiles, aspect ratios, "
            "the cross-attention mask), their default",
        )
        return True
    return False


def tokenizer_key(c: Converter, key: str, value: Any) -> bool:
    """A key of torchtune's `llama3_2_vision_transform` beyond a tokenizer's; False for any other."""
    if c.family != FAMILY or key != "image_size":
        return False
    _image_size(c, f"tokenizer.{key}", value)
    return True
