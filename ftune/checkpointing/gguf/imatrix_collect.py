"""An importance matrix from calibration text, through ftune's own model: what llama.cpp's llama-imatrix computes.

    imatrix = collect_imatrix("checkpoints/SmolLM2-135M", "calibration.txt", adapter_dir="out/step_60")
    write_imatrix("model.imatrix.gguf", imatrix)      # then: ftune export gguf ... --imatrix model.imatrix.gguf

The text (a UTF-8 file; or a `.jsonl` file of chat records, `{"messages": [...]}` a line, each
rendered through the model's chat template, one after another, so the statistic sees the prompts the
model will be given) is tokenized whole (no special tokens added) and cut into chunks of `chunk_size` tokens (the
rest, shorter than a chunk, is dropped), as llama-imatrix cuts it; a chunk starts with the BOS token
where the tokenizer adds one. Each chunk runs through the model (float32, the adapter merged) and a
hook on every linear layer of the decoder blocks adds, per input column, the squares of that layer's
inputs over the chunk's tokens (`in_sum2`) and the token count (`counts`). The output projection is
left out, as llama-imatrix leaves it out by default; so are the experts of a mixture of experts,
which ftune does not run as separate linear layers (their matrices are then quantized without
weights, as llama.cpp quantizes a matrix its file has no entry for). Names are the GGUF file's:
an ftune module's weight maps to its Hugging Face key (the family's converter) and then to llama.cpp's
name (gguf's tensor-name map), exactly as `export_gguf` names it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import gguf
import torch
from torch import nn

from ftune.checkpointing.families import converter
from ftune.checkpointing.gguf.export_meta import architecture
from ftune.checkpointing.gguf.export_tensors import gguf_arch
from ftune.checkpointing.gguf.imatrix import ImportanceMatrix
from ftune.checkpointing.hf import HFCheckpointer
from ftune.checkpointing.inference import build_float_model
from ftune.checkpointing.model_build import HF_CONFIG_FILE
from ftune.checkpointing.readers import read_json
from ftune.data import Message
from ftune.models import text_model_config
from ftune.tokenizers import HFTokenizer

logger = logging.getLogger(__name__)


def collect_imatrix(
    model_dir: str | os.PathLike,
    text_file: str | os.PathLike,
    *,
    adapter_dir: str | os.PathLike | None = None,
    chunk_size: int = 512,
    max_chunks: int | None = None,
) -> ImportanceMatrix:
    """The importance matrix of the model of `model_dir` (+ `adapter_dir` merged) on `text_file`.

    Args:
        model_dir: an HF-layout folder ftune reads (what `ftune export gguf` takes).
        text_file: UTF-8 calibration text, or a .jsonl file of chat records (never the data the model is
            evaluated on).
        adapter_dir: a LoRA/DoRA step folder to merge first, or None.
        chunk_size: tokens a chunk (llama-imatrix's context size, default 512 there too).
        max_chunks: run at most this many chunks (None: all).

    Raises:
        ValueError: the text is shorter than one chunk (says how many tokens it has).
    """
    folder = Path(model_dir).expanduser()
    text_path = Path(text_file).expanduser()
    tokenizer = HFTokenizer(folder)
    ids = tokenizer.encode(calibration_text(text_path, tokenizer), add_bos=False, add_eos=False)
    chunks = len(ids) // chunk_size if max_chunks is None else min(max_chunks, len(ids) // chunk_size)
    if chunks < 1:
        raise ValueError(
            f"calibration text {text_path} has {len(ids)} tokens, fewer than one chunk of {chunk_size}. "
            "Give a longer text (llama.cpp's users take a few hundred kB) or a smaller --chunk-size."
        )
    loaded = HFCheckpointer(folder).load()
    net = build_float_model(
        loaded,
        checkpoint_dir=folder,
        adapter_dir=adapter_dir,
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    layers = int(text_model_config(read_json(folder / HF_CONFIG_FILE))["num_hidden_layers"])
    names = block_linear_names(net, loaded.family, num_layers=layers)
    sums = {name: torch.zeros(module.in_features, dtype=torch.float64) for module, name in names.items()}
    counts = dict.fromkeys(sums, 0)

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].detach().reshape(-1, module.in_features).double()
        name = names[module]
        sums[name] += (x * x).sum(dim=0)
        counts[name] += x.shape[0]

    hooks = [module.register_forward_pre_hook(record) for module in names]
    try:
        with torch.inference_mode():
            for k in range(chunks):
                chunk = list(ids[k * chunk_size : (k + 1) * chunk_size])
                if tokenizer.bos_id is not None:
                    chunk[0] = tokenizer.bos_id  # llama-imatrix puts the BOS first where the model wants one
                net.hidden(torch.tensor([chunk]))
                logger.info("imatrix: chunk %d/%d", k + 1, chunks)
    finally:
        for hook in hooks:
            hook.remove()
    out = ImportanceMatrix(datasets=[text_path.name], chunk_count=chunks, chunk_size=chunk_size)
    for name, total in sums.items():
        out.sums[name] = total.float().numpy().reshape(1, -1)
        out.counts[name] = torch.tensor([float(counts[name])]).numpy()
    return out


def calibration_text(path: Path, tokenizer: HFTokenizer) -> str:
    """The text of `path`: the file itself, or a .jsonl file's chat records through the chat template.

    Raises:
        ValueError: a .jsonl line that is not a record with a `messages` list (names the line).
    """
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".jsonl":
        return text
    parts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
            raise ValueError(
                f'{path}:{number}: a .jsonl calibration file holds chat records, {{"messages": [{{"role": '
                f'..., "content": ...}}, ...]}} a line; this line has keys {sorted(record) if isinstance(record, dict) else type(record).__name__}. '
                "Pass such records, or a plain text file (any other suffix)."
            )
        parts.append(tokenizer.render([Message(m["role"], m["content"]) for m in record["messages"]]))
    return "".join(parts)


def block_linear_names(net: nn.Module, family: str, *, num_layers: int) -> dict[nn.Module, str]:
    """Each linear layer of the decoder blocks of `net` (ftune model) -> its weight's GGUF name.

    The ftune weights go through the family's converter to HF keys (matched back by storage, since a
    converter renames without copying) and gguf's name map to llama.cpp's names; a linear layer with
    no GGUF name of a block (`blk.N.`) is left out.
    """
    linears = {f"{n}.weight": m for n, m in net.named_modules() if isinstance(m, nn.Linear)}
    by_storage = {m.weight.data_ptr(): m for m in linears.values()}
    hf = converter(family).ftune_to_hf({key: m.weight for key, m in linears.items()})
    name_map = gguf.get_tensor_name_map(gguf_arch(architecture(family)), num_layers)
    out = {}
    for key, value in hf.items():
        module = by_storage.get(value.data_ptr())
        name = name_map.get_name(key.rpartition(".")[0])
        if module is not None and name is not None and name.startswith("blk."):
            out[module] = f"{name}.weight"
    if not out:
        raise ValueError(
            f"found no linear layer of the decoder blocks in the {family} model: an importance matrix needs "
            "them (this family's layers are not plain linear layers ftune can observe)."
        )
    return out
