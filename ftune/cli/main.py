"""`ftune`: the command line. Each subcommand lives in its own module and is imported only when used."""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys

from ftune import __version__

# name -> (module, one-line help). Modules are imported lazily so `ftune ls` never imports torch.
COMMANDS: dict[str, tuple[str, str]] = {
    "ls": ("ftune.cli.ls", "list recipes, their configs and (--features) the feature matrix"),
    "cp": ("ftune.cli.cp", "copy a recipe or config to edit it"),
    "cat": ("ftune.cli.cat", "print a config, resolved, with overrides applied"),
    "validate": ("ftune.cli.validate", "check a config without running anything"),
    "plan": (
        "ftune.cli.plan",
        "predict a training run's peak memory per rank, and what makes it fit (--memory)",
    ),
    "run": ("ftune.cli.run", "run a recipe (single process, or torchrun with --nproc_per_node etc.)"),
    "download": ("ftune.cli.download", "download a model from the Hugging Face hub"),
    "convert": ("ftune.cli.convert", "convert a checkpoint, e.g. `ftune convert gguf <file.gguf>`"),
    "export": ("ftune.cli.export", "export a model, e.g. `ftune export gguf <folder> <out.gguf>`"),
    "plot": ("ftune.cli.plot", "plot loss, val loss, lr, tokens/s and peak memory of one or several runs"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ftune",
        description="Recipe-first LLM fine-tuning in native PyTorch.",
        epilog="Run `ftune <command> --help` for a command's options. --debug or FTUNE_DEBUG=1 shows tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"ftune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] == "--version" or argv[0] not in COMMANDS:
        parser = build_parser()
        if argv and argv[0] not in ("-h", "--help", "--version") and argv[0] not in COMMANDS:
            close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            parser.exit(
                2,
                f"ftune: error: unknown command {argv[0]!r}.{hint} Commands: {', '.join(COMMANDS)}.\n",
            )
        parser.parse_args(argv)
        parser.print_help()
        return 0
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
