"""The fixed inputs of PPO's per-step parity with torchtune 0.6.1 (tests/recipes/test_ppo_recipe_vs_torchtune.py).

    python tests/recipes/ppo_parity_inputs.py /tmp/ppo_parity

writes, seeded: ``ckpt/`` (the tiny policy, tests/assets/tiny_checkpoint.py), ``rm/step_0/`` (a reward
model: the policy's weights with a seeded score head, saved by ftune's HFCheckpointer as a
LlamaForSequenceClassification folder), ``policy.safetensors`` and ``reward.safetensors`` (their HF
weights, for torchtune), ``config.json`` and ``rows.json`` (the prompts, the responses generation is made
to return, and the settings both recipes run with). tests/recipes/ppo_torchtune_golden.py reads them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "assets"))
from tiny_checkpoint import make_tiny_checkpoint  # noqa: E402

from ftune.checkpointing import HFCheckpointer  # noqa: E402

PAD, STOP, PROMPT_LEN = 0, 2, 5
SETTINGS = {
    "batch_size": 4, "ppo_epochs": 2, "max_generated_tokens": 6, "temperature": 0.7, "kl_coeff": 0.05,
    "gamma": 1.0, "lmbda": 0.95, "min_response_length": 2, "penalise_no_eos": True, "reward_penalty": -3.0,
    "lr": 1e-3, "epsilon": 0.2, "value_clip_range": 0.2, "value_coeff": 0.1,
}  # fmt: skip
# Where each of the 8 responses stops (None: never): early, late, on the last token, at once, never.
STOPS_AT = [1, 3, 5, None, 0, 2, 4, None]


def make_tiny_reward_model(folder: Path, tiny: Path, generator: torch.Generator) -> Path:
    """A reward model of the tiny checkpoint's weights with a score head drawn from ``generator`` (0.5 std):
    ``folder/step_0``, a LlamaForSequenceClassification folder written by ftune's HFCheckpointer."""
    checkpointer = HFCheckpointer(tiny, output_dir=folder)
    state = checkpointer.load().model
    state["score.weight"] = torch.randn(1, state["tok_embeddings.weight"].shape[1], generator=generator) * 0.5
    checkpointer.save(0, state, pad_token_id=PAD)
    return folder / "step_0"


def write_inputs(folder: Path) -> Path:
    """Write the inputs into ``folder`` (emptied first) and return it."""
    shutil.rmtree(folder, ignore_errors=True)
    ckpt = make_tiny_checkpoint(folder / "ckpt")
    g = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(3, 320, (n,), generator=g).tolist()  # noqa: E731 - no pad, stop or start id
    prompts = [ids(PROMPT_LEN) for _ in STOPS_AT]
    responses = []
    for at in STOPS_AT:
        row = ids(SETTINGS["max_generated_tokens"])
        if at is not None:
            row[at] = STOP
        responses.append(row)
    make_tiny_reward_model(folder / "rm", ckpt, g)
    shutil.copy(ckpt / "model.safetensors", folder / "policy.safetensors")
    save_file(
        load_file(str(folder / "rm" / "step_0" / "model.safetensors")), str(folder / "reward.safetensors")
    )
    shutil.copy(ckpt / "config.json", folder / "config.json")
    rows = {"pad": PAD, "stops": [STOP], "prompts": prompts, "responses": responses, "settings": SETTINGS}
    (folder / "rows.json").write_text(json.dumps(rows))
    return folder


if __name__ == "__main__":
    print(write_inputs(Path(sys.argv[1])))
