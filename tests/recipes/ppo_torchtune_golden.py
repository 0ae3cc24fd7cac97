"""Record torchtune 0.6.1's own PPO recipe, step by step, on fixed generations: tests/assets/ppo_torchtune_steps.json.

    python tests/recipes/ppo_parity_inputs.py /tmp/ppo_parity          # ftune's env: the inputs
    /tmp/ttenv/bin/python tests/recipes/ppo_torchtune_golden.py /tmp/ppo_parity   # torchtune 0.6.1's env

The inputs (tests/recipes/ppo_parity_inputs.py writes them, seeded): the tiny policy and a reward model
(the policy's weights with a seeded score head) in HF names, the prompts (one length: torchtune
left-pads, ftune does not) and the responses its generation is made to return (untruncated, as
torchtune's ``generation.generate`` returns them). torchtune's ``PPOFullFinetuneRecipeSingleDevice`` runs
its own ``train()`` over them: its models are torchtune's llama3 decoders (plain RoPE at the checkpoint's
base, the LM head tied to the embeddings, as SmolLM2's; a one-output head for the reward and value
models) loaded through ``torchtune.models.convert_weights.hf_to_tune``; ``generation.generate`` returns
the fixed responses and the logits of a forward over them (torchtune's generation returns logits too);
``ppo_step`` is wrapped to record each optimizer step's figures (gradient accumulation 1). The
recipe's settings here are the ones the ftune test gives its recipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from torchtune import generation
from torchtune.models.convert_weights import hf_to_tune
from torchtune.models.llama3._component_builders import llama3
from torchtune.modules import TiedLinear
from torchtune.rlhf.loss import PPOLoss

OUT = Path(__file__).resolve().parents[1] / "assets" / "ppo_torchtune_steps.json"


def decoder(config: dict, sd: dict, *, score: bool) -> nn.Module:
    dims = dict(num_heads=config["num_attention_heads"], num_kv_heads=config["num_key_value_heads"])
    model = llama3(
        vocab_size=config["vocab_size"], num_layers=config["num_hidden_layers"], embed_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_seq_len=512, rope_base=int(config["rope_theta"]),
        norm_eps=config["rms_norm_eps"], **dims,
    )  # fmt: skip
    sd = dict(sd)
    head = sd.pop("score.weight", None)
    tune = hf_to_tune(sd, dim=config["hidden_size"], **dims)
    if score:
        model.output = nn.Linear(config["hidden_size"], 1, bias=False)
        tune["output.weight"] = head
    else:
        del model.output  # a registered nn.Linear: a TiedLinear (no module) takes its place
        model.output = TiedLinear(model.tok_embeddings)  # SmolLM2 ties its LM head to the embeddings
    model.load_state_dict(tune, strict=True)
    return model


def main(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "tt_ppo", Path(generation.__file__).parents[2] / "recipes" / "ppo_full_finetune_single_device.py"
    )
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    inputs = json.loads((folder / "rows.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    s = inputs["settings"]
    policy_sd, reward_sd = (
        load_file(str(folder / "policy.safetensors")),
        load_file(str(folder / "reward.safetensors")),
    )
    torch.manual_seed(0)
    r = tt.PPOFullFinetuneRecipeSingleDevice.__new__(tt.PPOFullFinetuneRecipeSingleDevice)
    r._device, r._dtype = torch.device("cpu"), torch.float32
    r._policy_model = decoder(config, policy_sd, score=False)
    r._ref_policy_model = decoder(config, policy_sd, score=False).requires_grad_(False).eval()
    r._value_model = decoder(config, reward_sd, score=True)
    r._reward_model = decoder(config, reward_sd, score=True).requires_grad_(False).eval()
    r._optimizer = torch.optim.AdamW(
        list(r._policy_model.parameters()) + list(r._value_model.parameters()), lr=s["lr"], weight_decay=0.0
    )
    r._loss_fn = PPOLoss(
        epsilon=s["epsilon"], value_clip_range=s["value_clip_range"], value_coeff=s["value_coeff"]
    )
    r._tokenizer = type("Tok", (), {"pad_id": inputs["pad"]})()
    r.batch_size = r._forward_batch_size = r._ppo_batch_size = s["batch_size"]
    r._ppo_epochs, r._gradient_accumulation_steps = s["ppo_epochs"], 1
    r._ppo_backward_batch_size = s["batch_size"]
    r._temperature, r._top_k, r._max_generated_tokens = s["temperature"], None, s["max_generated_tokens"]
    r._kl_coeff, r._gamma, r._lmbda = s["kl_coeff"], s["gamma"], s["lmbda"]
    r._min_response_length, r._penalise_no_eos, r._reward_penalty = (
        s["min_response_length"], s["penalise_no_eos"], s["reward_penalty"],
    )  # fmt: skip
    r._stop_token_ids = torch.tensor(inputs["stops"])
    r.enable_kv_cache, r.cache_ctx_manager = False, lambda *a, **k: contextlib.nullcontext()
    r._rng, r.compile, r._optimizer_in_bwd = torch.Generator().manual_seed(0), False, False
    r._epochs_run, r._steps_run, r.global_step = 0, 0, 0
    prompts = torch.tensor(inputs["prompts"])  # (n, p): one length, no padding
    batches = [prompts[i : i + s["batch_size"]] for i in range(0, len(prompts), s["batch_size"])]
    r._dataloader = [{"tokens": b} for b in batches]
    r._sampler = type("S", (), {"set_epoch": lambda self, e: None})()
    r._total_steps, r._total_epochs = len(batches), 1
    r._profiler = type("P", (), {"start": lambda s: None, "step": lambda s: None, "stop": lambda s: None})()
    r.profiler_profile_memory, r._log_every_n_steps, r._log_peak_memory_stats = False, 1, False
    logged = []
    r._metric_logger = type(
        "L", (), {"log_dict": lambda self, d, step: logged.append({k: float(v) for k, v in d.items()})}
    )()
    r.save_checkpoint = lambda *a, **k: None
    responses = {tuple(p): resp for p, resp in zip(inputs["prompts"], inputs["responses"])}

    def fixed_generate(model, prompt, **kwargs):
        """The fixed responses, and the policy's logits of them (a forward, as generation computes them)."""
        rows = torch.cat([prompt, torch.tensor([responses[tuple(p)] for p in prompt.tolist()])], dim=1)
        with torch.no_grad():
            logits = model(rows)[:, prompt.shape[1] - 1 : -1]
        return rows, logits

    tt.generation.generate = fixed_generate
    steps = []
    step = r.ppo_step

    def recorded(*args, **kwargs):
        out = step(*args, **kwargs)
        steps.append({name: float(v.detach()) for name, v in out._asdict().items()})
        return out

    r.ppo_step = recorded
    r.train()
    digest = hashlib.sha256(
        (folder / "policy.safetensors").read_bytes() + (folder / "reward.safetensors").read_bytes()
    )
    golden = {"torch": torch.__version__, "torchtune": "0.6.1", "inputs_sha256": digest.hexdigest(),
              "rows_sha256": hashlib.sha256((folder / "rows.json").read_bytes()).hexdigest(),
              "steps": steps, "trajectories": logged}  # fmt: skip
    OUT.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {OUT}: {len(steps)} steps, losses {[round(x['loss'], 6) for x in steps]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
