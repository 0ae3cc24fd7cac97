"""Write tests/assets/llama3_2_vision_torchtune.pt: a tiny Llama 3.2 Vision in torchtune 0.6.1's own keys,
made by torchtune's converters (the reference for `ftune.models.llama3_2_vision.torchtune_to_ftune`).

    python tests/assets/make_llama3_2_vision_torchtune.py --torchtune-python <python of a torchtune 0.6.1 env>

It saves `tiny_mllama()` (tests/models/test_llama3_2_vision_torchtune.py) with save_pretrained, runs
torchtune's `llama3_vision_hf_to_tune` on it in that environment, and stores the result with the tile
embeddings torchtune's `llama3_vision_tune_to_hf` gives back. torchtune's package imports torchvision,
which its converters do not need: the two converter files are loaded by path.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "llama3_2_vision_torchtune.pt"
# The sizes of tiny_mllama(), as torchtune's converters take them.
KWARGS = dict(
    num_heads=4,
    num_kv_heads=2,
    dim=16,
    vocab_size=32,
    cross_attention_layers=[1],
    encoder_dim=8,
    tile_size=8,
    num_tiles=4,
    supported_aspect_ratios=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
)
_IN_TORCHTUNE = """
import importlib.util, sys, types, torch
from safetensors.torch import load_file
site = sys.argv[1]
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
for package in ("torchtune", "torchtune.models"):
    stub = types.ModuleType(package)
    stub.__path__ = []
    sys.modules[package] = stub
load("torchtune.models.convert_weights", site + "/convert_weights.py")
convert = load("torchtune_vision_convert", site + "/llama3_2_vision/_convert_weights.py")
kwargs = eval(sys.argv[4])
tune = convert.llama3_vision_hf_to_tune(load_file(sys.argv[2]), **kwargs)
back = convert.llama3_vision_tune_to_hf(tune, **kwargs)
tiles = {k: v for k, v in back.items() if "tile" in k}
torch.save({"tune": {k: v.contiguous() for k, v in tune.items()}, "hf_tiles": tiles}, sys.argv[3])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchtune-python", required=True, help="python of an env with torchtune==0.6.1")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent / "models"))
    from test_llama3_2_vision_torchtune import tiny_mllama

    with tempfile.TemporaryDirectory() as tmp:
        tiny_mllama().save_pretrained(tmp)
        site = subprocess.run(
            [args.torchtune_python, "-c", "import importlib.util as u; print(u.find_spec('torchtune').submodule_search_locations[0])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip() + "/models"  # fmt: skip
        weights = str(Path(tmp) / "model.safetensors")
        subprocess.run(
            [args.torchtune_python, "-c", _IN_TORCHTUNE, site, weights, str(OUT), repr(KWARGS)], check=True
        )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
