"""`ftune download <repo-id>`: fetch a model from the Hugging Face hub into ftune's model folder."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import snapshot_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from ftune.config.loading import ftune_home


def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect to the hub, instead of the hub client's long retry loop."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def default_output_dir(repo_id: str) -> Path:
    """``$FTUNE_HOME/models/<repo name>``, the folder the shipped configs point at."""
    return Path(ftune_home()) / "models" / repo_id.split("/")[-1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ftune download",
        description="Download a model repo from the Hugging Face hub (to $FTUNE_HOME/models/<name>, "
        "default ~/.cache/ftune/models/<name>).",
    )
    parser.add_argument("repo_id", help="e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--output-dir", type=Path, help="where to put the files")
    parser.add_argument("--hf-token", default=None, help="token for gated repos (default: $HF_TOKEN)")
    parser.add_argument(
        "--ignore-patterns",
        nargs="*",
        default=["original/consolidated*", "*.pth"],
        help="glob patterns of files to skip (default skips Meta's original weights)",
    )
    args = parser.parse_args(argv)
    out = args.output_dir or default_output_dir(args.repo_id)
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    if offline or not hub_reachable():
        why = (
            "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub is not reachable from this machine"
        )
        print(
            f"ftune: error: cannot download {args.repo_id}: {why}. Copy the model folder to {out} by other "
            "means, or for the quickstart model run `ftune convert gguf smollm2` (works offline).",
            file=sys.stderr,
        )
        return 1
    try:
        path = snapshot_download(
            args.repo_id, local_dir=out, token=args.hf_token, ignore_patterns=args.ignore_patterns
        )
    except GatedRepoError:
        print(
            f"ftune: error: {args.repo_id} is gated: accept its licence on huggingface.co, then pass "
            "--hf-token <token> (or set HF_TOKEN).",
            file=sys.stderr,
        )
        return 1
    except RepositoryNotFoundError:
        print(
            f"ftune: error: no repo {args.repo_id!r} on the hub (or it is private: pass --hf-token).",
            file=sys.stderr,
        )
        return 1
    print(f"Downloaded {args.repo_id} to {path}")
    return 0
