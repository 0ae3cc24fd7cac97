"""`ftune export gguf <model folder> <out.gguf> --type T [--adapter DIR [--adapter-only]] [--imatrix FILE] [--force]
[--make-parents]` and `ftune export imatrix <model folder> <out.gguf> --text FILE [--adapter DIR]`.

The model folder is any HF-layout folder ftune reads (a base model, a full fine-tune's step folder,
a LoRA run's merged/ folder); `--adapter` merges a LoRA/DoRA step folder into it first. Beside the
file goes `<name>.Modelfile` for Ollama. With `--adapter-only` the LoRA adapter is written unmerged,
as the adapter file llama.cpp applies over its base model (`--lora`), and no Modelfile. An
image-text model (Gemma 3, SmolVLM) also gives `mmproj-<name>.gguf`, its vision tower and projector,
which llama.cpp's `llama-mtmd-cli --mmproj` loads beside the model file. `--imatrix` quantizes with an
importance matrix, as `llama-quantize --imatrix` does; `ftune export imatrix` makes one (llama.cpp's
GGUF imatrix file, what llama-imatrix writes) from calibration text through the model.

Outputs never land on inputs (`ftune.checkpointing.output_guard`): the file and its Modelfile are
replaced only with --force, never inside the model or adapter folder, never through a symbolic link, and
a missing parent folder is created only with --make-parents (`ftune.config.output_path`, the rule
`ftune cp` shares); every argument is checked before torch and the exporter are imported (well under a
second), the exporter after.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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
    g = _subcommand(
        sub,
        "gguf",
        help="an ftune model folder (+ adapter) to one .gguf file llama.cpp and Ollama run",
        output_help="the .gguf file to write (its folder must exist, or pass --make-parents)",
    )
    g.add_argument(
        "--type",
        required=True,
        metavar="TYPE",
        help=f"file type: {', '.join(GGUF_TYPES)} (q8_0: near-lossless, half of f16; q4_k_m: the usual 4-bit)",
    )
    g.add_argument("--adapter", **_ADAPTER)
    g.add_argument(
        "--adapter-only",
        action="store_true",
        help="write the --adapter unmerged, as a LoRA adapter file for llama.cpp's --lora (types f32, f16, bf16, q8_0)",
    )
    g.add_argument(
        "--imatrix",
        type=Path,
        help="an importance matrix (GGUF, from `ftune export imatrix` or llama-imatrix) to quantize with "
        "(types q6_k, q5_k_*, q4_k_*, q4_0)",
    )
    g.add_argument("--name", help="general.name in the file (default: the model folder's name)")
    _add_output_flags(g, force_help="replace an existing output file and its Modelfile")
    m = _subcommand(
        sub,
        "imatrix",
        help="an importance matrix of a model on calibration text, for `export gguf --imatrix`",
        output_help="the imatrix .gguf file to write",
    )
    m.add_argument(
        "--text", type=Path, required=True, help="UTF-8 calibration text (not the evaluation data)"
    )
    m.add_argument("--adapter", **_ADAPTER)
    m.add_argument(
        "--chunk-size", type=int, default=512, help="tokens a chunk (llama-imatrix's -c; default 512)"
    )
    m.add_argument("--chunks", type=int, help="run at most this many chunks (default: the whole text)")
    _add_output_flags(m, force_help="replace an existing output file")
    args = parser.parse_args(argv)
    if args.kind == "imatrix":
        return _export_imatrix(args)
    try:
        check_adapter_gguf_type(args.type) if args.adapter_only else check_gguf_type(args.type)
        _check_outputs(args)  # every argument checked before torch and the exporter load
        if args.adapter_only:
            return _export_adapter(args)
        from ftune.checkpointing.gguf.export import export_gguf  # torch and gguf: see LATE in test_layout

        exported = export_gguf(
            args.model_dir,
            args.output,
            file_type=args.type,
            adapter_dir=args.adapter,
            name=args.name,
            imatrix=args.imatrix,
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


# --adapter, as both subcommands take it.
_ADAPTER: dict[str, Any] = {"type": Path, "help": "a LoRA/DoRA step folder to merge into the model first"}


def _subcommand(
    sub: argparse._SubParsersAction, name: str, *, help: str, output_help: str
) -> argparse.ArgumentParser:
    """A subcommand with the positional arguments both take: the model folder and the output file."""
    p = sub.add_parser(name, help=help)
    p.add_argument(
        "model_dir", type=Path, help="HF-layout model folder (config.json, weights, tokenizer.json)"
    )
    p.add_argument("output", help=output_help)
    return p


def _add_output_flags(p: argparse.ArgumentParser, *, force_help: str) -> None:
    """The flags both subcommands end with: --force, --make-parents, --debug."""
    p.add_argument("--force", action="store_true", help=force_help)
    p.add_argument("--make-parents", action="store_true", help="create the output's missing parent folders")
    p.add_argument("--debug", action="store_true")


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


def _export_imatrix(args: argparse.Namespace) -> int:
    """`export imatrix`: the importance matrix of the model (+ adapter) on the text, as llama-imatrix writes it."""
    try:
        given = args.output
        args.output = Path(given).expanduser()
        if args.output.suffix != ".gguf":
            raise ValueError(
                f"output {given!r} does not end in .gguf; ftune writes llama.cpp's GGUF imatrix file. "
                f"Give a file name such as {args.output.with_suffix('.gguf').name}."
            )
        if not args.text.is_file():
            raise FileNotFoundError(
                f"--text {str(args.text)!r} is not a file. Pass a UTF-8 calibration text (for instance the "
                "training data's text, or docs), never the data the model is evaluated on."
            )
        if args.chunk_size < 16:  # llama-imatrix skips batches of fewer than 16 tokens
            raise ValueError(
                f"--chunk-size {args.chunk_size} is below 16 tokens; give 16 or more (512 is usual)."
            )
        args.model_dir = args.model_dir.expanduser()
        require_model_folder(args.model_dir)
        inputs = {"the model folder": args.model_dir, "the --adapter folder": args.adapter}
        check_output_dir(given, inputs, key="output", fix="Write the imatrix file outside the input folders.")
        output_file(given, option="output", force=args.force, make_parents=args.make_parents)
        check_model_folder(args.model_dir)
        if args.adapter is not None:
            check_adapter_folder(args.adapter.expanduser())
        from ftune.checkpointing.gguf.imatrix import write_imatrix  # torch and gguf: see LATE
        from ftune.checkpointing.gguf.imatrix_collect import collect_imatrix

        imatrix = collect_imatrix(
            args.model_dir,
            args.text,
            adapter_dir=args.adapter,
            chunk_size=args.chunk_size,
            max_chunks=args.chunks,
        )
        write_imatrix(args.output, imatrix)
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    print(
        f"Wrote {args.output} (importance matrix of {len(imatrix.sums)} matrices over {imatrix.chunk_count} chunks "
        f"of {imatrix.chunk_size} tokens of {args.text.name}).\n"
        f"  ftune:     ftune export gguf {args.model_dir} <out.gguf> --type q4_k_m --imatrix {args.output}\n"
        f"  llama.cpp: llama-quantize --imatrix {args.output} <model.F16.gguf> <out.gguf> Q4_K_M"
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
