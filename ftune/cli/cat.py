"""`ftune cat <config> [key=value ...]`: print the resolved config."""

from __future__ import annotations

import argparse

from ftune.config.loading import load_config
from ftune.config.run import report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ftune cat", description="Print a config, resolved, with overrides."
    )
    parser.add_argument("config", help="shipped config name (see `ftune ls`) or path to a .yaml file")
    parser.add_argument("overrides", nargs="*", help="key=value, a.b=value, ~key")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_intermixed_args(argv)  # options may follow the overrides
    try:
        print(load_config(args.config, args.overrides).to_yaml(), end="")
    except Exception as e:  # noqa: BLE001
        return report(e, ["--debug"] if args.debug else [])
    return 0
