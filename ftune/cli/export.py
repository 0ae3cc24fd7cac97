"""`ftune export gguf <model folder> <out.gguf> --type T [--adapter DIR [--adapter-only]] [--force] [--make-parents]`.

The model folder is any HF-layout folder ftune reads (a base model, a full fine-tune's step folder,
a LoRA run's merged/ folder); `--adapter` merges a LoRA/DoRA step folder into it first. Beside the
file goes `<name>.Modelfile` for Ollama. With `--adapter-only` the LoRA adapter is written unmerged,
as the adapter file llama.cpp applies over its base model (`--lora`), and no Modelfile. An
image-text model (Gemma 3, SmolVLM) also gives `mmproj-<name>.gguf`, its vision tower and projector,
which llama.cpp's `llama-mtmd-cli --mmproj` loads beside the model file.

Outputs never land on inputs (`ftune.checkpointing.output_guard`): the file and its Modelfile are
replaced only with --force, never inside the model or adapter folder, never through a symbolic link, and
a missing parent folder is created only with --make-parents (`ftune.config.output_path`, the rule
`ftune cp` shares); every argument is checked before torch and the exporter are imported (well under a
second), the exporter after.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ftune.config.gguf_args import (
    GGUF_TYPES,
    check_adapter_folder,
    check_adapter_gguf_type,
    check_gguf_type,
    check_mmproj_exportable,
    check_model_folder,
    mmproj_path,
    modelfile_path,
    require_model_folder,
)
from ftune.config.output_path import check_output_dir, output_file
from ftune.config.run import report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ftune export", description="Export a model for other runtimes.")
    sub = parser.add_subparsers(dest="kind", required=True)
    g = sub.add_parser(
        "gguf", help="an ftune model folder (+ adapter) to one .gguf file llama.cpp and Ollama run"
    )
    g.add_argument(
        "model_dir", type=Path, help="HF-layout model folder (config.json, weights, tokenizer.json)"
    )
    g.add_argument("output", help="the .gguf file to write (its folder must exist, or pass --make-parents)")
    g.add_argument(
        "--type",
        required=True,
        metavar="TYPE",
        help=f"file type: {', '.join(GGUF_TYPES)} (q8_0: near-lossless, half of f16; q4_k_m: the usual 4-bit)",
    )
    g.add_argument("--adapter", type=Path, help="a LoRA/DoRA step folder to merge into the model first")
    g.add_argument(
        "--adapter-only",
        action="store_true",
        help="write the --adapter unmerged, as a LoRA adapter file for llama.cpp's --lora (types f32, f16, bf16, q8_0)",
    )
    g.add_argument("--name", help="general.name in the file (default: the model folder's name)")
    g.add_argument("--force", action="store_true", help="replace an existing output file and its Modelfile")
    g.add_argument("--make-parents", action="store_true", help="create the output's missing parent folders")
    g.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    try:
        check_adapter_gguf_type(args.type) if args.adapter_only else check_gguf_type(args.type)
        _check_outputs(args)  # every argument checked before torch and the exporter load
        if args.adapter_only:
            return _export_adapter(args)
        from ftune.checkpointing.gguf.export import export_gguf  # torch and gguf: see LATE in test_layout

        exported = export_gguf(
            args.model_dir, args.output, file_type=args.type, adapter_dir=args.adapter, name=args.name
        )
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    size = exported.path.stat().st_size / 2**20
    types = ", ".join(f"{n} {k}" for k, n in sorted(exported.types.items()))
    if exported.mmproj is not None:
        print(
            f"Wrote {exported.path} (the text decoder: {exported.family} as llama.cpp '{exported.architecture}', "
            f"{args.type.lower()}, {size:.1f} MiB; tensors: {types}), {exported.mmproj.name} (the vision tower and "
            f"projector) and {exported.modelfile.name}.\n"
            f"  llama.cpp: llama-mtmd-cli -m {exported.path} --mmproj {exported.mmproj} --image <picture> -p <prompt>"
        )
        return 0
    print(
        f"Wrote {exported.path} ({exported.family} as llama.cpp '{exported.architecture}', {args.type.lower()}, "
        f"{size:.1f} MiB; tensors: {types}) and {exported.modelfile.name}.\n"
        f"  llama.cpp: llama-cli -m {exported.path} -cnv\n"
        f"  Ollama:    ollama create my-model -f {exported.modelfile}"
    )
    return 0


def _export_adapter(args: argparse.Namespace) -> int:
    """`--adapter-only`: the adapter as a llama.cpp LoRA file, no Modelfile (it needs its base model)."""
    try:
        from ftune.checkpointing.gguf.export_lora import export_lora_gguf  # torch and gguf: see LATE

        exported = export_lora_gguf(
            args.model_dir, args.adapter, args.output, file_type=args.type, name=args.name
        )
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    print(
        f"Wrote {exported.path} (a LoRA adapter of {exported.modules} matrices for llama.cpp '{exported.architecture}', "
        f"alpha {exported.alpha:g}, {args.type.lower()}).\n"
        f"  llama.cpp: llama-cli -m <the base model exported as .gguf> --lora {exported.path}"
    )
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse inputs that are not a model and an adapter folder, and outputs that are not a new .gguf file
    outside the inputs: from the arguments and folder listings, before torch is imported."""
    given = args.output
    args.output = Path(given).expanduser()
    if args.output.suffix != ".gguf":
        raise ValueError(
            f"output {given!r} does not end in .gguf; llama.cpp and Ollama expect a .gguf file. "
            f"Give a file name such as {args.output.with_suffix('.gguf').name}."
        )
    args.model_dir = args.model_dir.expanduser()
    require_model_folder(args.model_dir)
    if args.adapter_only and args.adapter is None:
        raise ValueError(
            "--adapter-only writes a LoRA step folder's adapter, unmerged, but no --adapter was given. "
            "Pass --adapter output_dir/step_<N> (the base model stays the model folder)."
        )
    inputs = {"the model folder": args.model_dir, "the --adapter folder": args.adapter}
    outputs = [given] if args.adapter_only else [given, modelfile_path(args.output)]
    if not args.adapter_only and check_mmproj_exportable(args.model_dir):  # an image-text model
        outputs.append(mmproj_path(args.output))
    for path in outputs:  # the rule `ftune cp` shares (ftune.config.output_path)
        check_output_dir(path, inputs, key="output", fix="Write the .gguf file outside the input folders.")
        output_file(path, option="output", force=args.force, make_parents=args.make_parents)
    check_model_folder(args.model_dir)  # from its listing, as the exporter would find it after loading torch
    if args.adapter is not None:
        check_adapter_folder(args.adapter.expanduser())
