"""The torchtune 0.6.1 config converter behind `ftune convert torchtune-config`.

    conversion = convert_torchtune_config(load_torchtune_yaml(text))   # .config, .recipe, .report
    print(render_yaml(conversion, "8B_lora.yaml"))

Modules, lowest first: `table` (the key and component mappings, data only), `conversion` (the result
and the state the rules share), `methods` (the DPO, distillation and lm-eval rules), `convert` (the
conversion), `yaml_io` (torchtune's YAML in, the converted YAML out, validation), `corpus` and `docs`
(every config of the torchtune wheel, docs/migrating-from-torchtune.md). Torch-free.
"""

from ftune.torchtune.conversion import Conversion, KeyReport
from ftune.torchtune.convert import convert_torchtune_config, infer_recipe
from ftune.torchtune.yaml_io import conversion_problems, leaf_keys, load_torchtune_yaml, render_yaml

__all__ = [
    "Conversion",
    "KeyReport",
    "conversion_problems",
    "convert_torchtune_config",
    "infer_recipe",
    "leaf_keys",
    "load_torchtune_yaml",
    "render_yaml",
]
