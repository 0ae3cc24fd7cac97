"""Checkpoints in and out: HF safetensors, Meta `.pth`, ftune native, DCP; atomic step folders; resume.

ckpt = HFCheckpointer(checkpoint_dir, output_dir, resume_from_checkpoint="auto")
loaded = ckpt.load()                         # Loaded(model, adapter, recipe_state, family, step_dir)
model = build_model(cfg.model, loaded.model, device=device, dtype=dtype)   # meta build, weights assigned
model = load_hf("path/to/SmolLM2-135M")     # an HF folder to a model in one call (meta build + mmap'd weights)
model = load_inference_model(ckpt, adapter_dir=..., device=..., dtype=...)  # generate/eval: merged or quantized
ckpt.save(step, model.state_dict(), recipe_state=..., adapter_config=...)   # -> output_dir/step_<N>/
"""

from ftune.checkpointing._checkpointer import SIDE_FILES, Checkpointer
from ftune.checkpointing.atomic import (
    COMPLETE_MARKER,
    atomic_path,
    find_latest_complete,
    is_complete,
    mark_complete,
    prune,
    save_safetensors,
    step_dir,
    torch_save,
    write_json,
)
from ftune.checkpointing.hf import HFCheckpointer, load_hf
from ftune.checkpointing.inference import (
    build_float_model,
    load_inference_model,
    load_quantized_model,
    merge_adapter_folder,
)
from ftune.checkpointing.loaded import Loaded
from ftune.checkpointing.meta import MetaCheckpointer
from ftune.checkpointing.model_build import (
    HF_CONFIG_FILE,
    build_model,
    cast_floating,
    meta_model,
    model_from_checkpoint,
    read_hf_config,
)
from ftune.checkpointing.model_fit import check_fits, check_tokenizer_fits, load_into, split_adapter
from ftune.checkpointing.native import NativeCheckpointer, write_native
from ftune.checkpointing.output_guard import OutputOnInputError, check_output_dir
from ftune.checkpointing.quantized import load_quantized, read_quantized, save_quantized
from ftune.checkpointing.recipe_state import (
    check_weights_only_safe,
    load_recipe_state,
    save_recipe_state,
    to_weights_only_safe,
)

__all__ = [
    "OutputOnInputError",
    "check_output_dir",
    "COMPLETE_MARKER",
    "HF_CONFIG_FILE",
    "SIDE_FILES",
    "Checkpointer",
    "HFCheckpointer",
    "Loaded",
    "MetaCheckpointer",
    "NativeCheckpointer",
    "atomic_path",
    "check_fits",
    "check_tokenizer_fits",
    "check_weights_only_safe",
    "find_latest_complete",
    "is_complete",
    "load_hf",
    "load_into",
    "load_quantized",
    "read_quantized",
    "save_quantized",
    "load_recipe_state",
    "mark_complete",
    "prune",
    "save_recipe_state",
    "save_safetensors",
    "split_adapter",
    "step_dir",
    "to_weights_only_safe",
    "torch_save",
    "write_json",
    "build_float_model",
    "build_model",
    "cast_floating",
    "load_inference_model",
    "load_quantized_model",
    "merge_adapter_folder",
    "meta_model",
    "model_from_checkpoint",
    "read_hf_config",
    "write_native",
]
