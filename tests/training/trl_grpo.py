"""TRL 1.16's GRPO code, run unchanged from its installed source with a stand-in ``self``.

``_compute_loss``, the advantage block and the reward-logging lines of
``_generate_and_score_completions`` and the ``nanstd``/``nanmin``/``nanmax`` helpers are read with
`ast` and executed without importing the trainer (which pulls in transformers' Trainer and
accelerate). Used by test_grpo_loss.py and test_grpo_rewards.py.
"""

import ast
import importlib.util
import math
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import torch

TRL = Path(importlib.util.find_spec("trl").submodule_search_locations[0])


# ---- TRL's code, unchanged, with a stand-in self ---------------------------------------------------


def _trl_source(relative: str) -> tuple[ast.Module, str]:
    path = TRL / relative
    return ast.parse(path.read_text()), str(path)


def _trl_scope() -> dict:
    tree, path = _trl_source("trainer/utils.py")
    fns = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("nanstd", "nanmin", "nanmax")
    ]
    scope = {"torch": torch}
    exec(compile(ast.Module(body=fns, type_ignores=[]), path, "exec"), scope)  # noqa: S102 - TRL's source
    return scope


def _trl_grpo_method(name: str) -> ast.FunctionDef:
    tree, _ = _trl_source("trainer/grpo_trainer.py")
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOTrainer")
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)


def trl_advantages(
    rewards: torch.Tensor, group_size: int, scale_rewards: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's ``sum_then_normalize`` block (one reward function): (advantages, is_std_zero)."""
    fn = _trl_grpo_method("_generate_and_score_completions")
    block = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.If)
        and isinstance(n.test, ast.Compare)
        and getattr(n.test.left, "attr", None) == "multi_objective_aggregation"
    )
    scope = _trl_scope()
    scope.update(
        self=SimpleNamespace(
            multi_objective_aggregation="sum_then_normalize",
            scale_rewards=scale_rewards,
            reward_weights=torch.ones(1),
        ),
        rewards_per_func=rewards[:, None].float(),
        num_generations=group_size,
        device=rewards.device,
        unscorable_mask=torch.zeros(rewards.shape[0], dtype=torch.bool),
    )
    _, path = _trl_source("trainer/grpo_trainer.py")
    exec(compile(ast.Module(body=[block], type_ignores=[]), path, "exec"), scope)  # noqa: S102
    return scope["advantages"], scope["is_std_zero"]


def trl_reward_metrics(rewards_per_func: torch.Tensor, names: list[str], group_size: int) -> dict[str, float]:
    """TRL's reward figures of one generation batch (``rewards_per_func`` [completions, functions],
    weights 1): the lines of ``_generate_and_score_completions`` from its per-function loop through
    ``frac_reward_zero_std``, run after its advantage block."""
    fn = _trl_grpo_method("_generate_and_score_completions")

    def starts_logging(node):
        return isinstance(node, ast.For) and "reward_func_names" in ast.unparse(node.iter)

    body = next(n.body for n in ast.walk(fn) if any(starts_logging(c) for c in getattr(n, "body", [])))
    first = next(i for i, c in enumerate(body) if starts_logging(c))
    last = next(i for i, c in enumerate(body) if "frac_reward_zero_std" in ast.unparse(c))
    _, is_std_zero = trl_advantages(rewards_per_func.sum(1), group_size, "group")
    metrics = defaultdict(list)
    scope = _trl_scope()
    scope.update(
        self=SimpleNamespace(
            reward_func_names=names, reward_weights=torch.ones(len(names)), _metrics={"train": metrics}
        ),
        mode="train",
        rewards_per_func=rewards_per_func.float(),
        unscorable_mask=torch.zeros(rewards_per_func.shape[0], dtype=torch.bool),
        is_std_zero=is_std_zero,
    )
    _, path = _trl_source("trainer/grpo_trainer.py")
    exec(compile(ast.Module(body=body[first : last + 1], type_ignores=[]), path, "exec"), scope)  # noqa: S102
    return {k: v[-1] for k, v in metrics.items()}


def trl_loss(
    loss_type,
    *,
    beta,
    eps,
    eps_high,
    max_len,
    logps,
    old,
    ref,
    adv,
    mask,
    accum=1,
    num_items=None,
    ratio_kl=False,
    tool_mask=None,
    is_ratio=None,
):
    """TRL's ``GRPOTrainer._compute_loss`` on one micro-batch: (loss, logged metrics). ``ratio_kl`` is
    ``GRPOConfig.use_bias_correction_kl`` (TRL's default True; False is the plain k3). ``tool_mask`` is
    TRL's multi-turn mask (0 at tool-result tokens of a completion, 1 elsewhere); ``is_ratio`` the
    truncated importance weights of ``vllm_importance_sampling_correction`` (its use_vllm path on)."""
    fn = _trl_grpo_method("_compute_loss")
    fn.decorator_list = []
    scope = _trl_scope()
    _, path = _trl_source("trainer/grpo_trainer.py")
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), scope)  # noqa: S102

    class Accelerator:
        num_processes = 1

        @staticmethod
        def gather(x):
            return x

        @staticmethod
        def reduce(x, reduction):
            return x

    def per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return logps, torch.zeros_like(logps.detach()), None

    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=per_token_logps_and_entropies,
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type=loss_type,
        epsilon_low=eps,
        epsilon_high=eps_high,
        use_vllm=is_ratio is not None,
        vllm_importance_sampling_correction=is_ratio is not None,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=accum,
        max_completion_length=max_len,
        accelerator=Accelerator(),
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=SimpleNamespace(use_bias_correction_kl=ratio_kl, delta=None, steps_per_generation=accum),
    )
    inputs = {
        "prompt_ids": torch.zeros(logps.shape[0], 2, dtype=torch.long),
        "prompt_mask": torch.ones(logps.shape[0], 2, dtype=torch.long),
        "completion_ids": torch.zeros(logps.shape, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": torch.tensor(float(mask.sum() if num_items is None else num_items)),
    }
    if beta:
        inputs["ref_per_token_logps"] = ref
    if tool_mask is not None:
        inputs["tool_mask"] = tool_mask
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    loss = scope["_compute_loss"](stand_in, None, inputs)
    return loss, {k: v[-1] for k, v in stand_in._metrics["train"].items()}


# ---- inputs ----------------------------------------------------------------------------------------


def trl_is_ratio(old, sampling, completion_mask, tool_mask, *, cap, mode="token_truncate"):
    """TRL's ``vllm_importance_sampling_correction`` block of ``_generate_and_score_completions`` (the
    ``if`` that computes ``vllm_importance_sampling_ratio``), run on the given log-probabilities."""
    fn = _trl_grpo_method("_generate_and_score_completions")
    block = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.If)
        and "per_token_logps_diff" in ast.unparse(n)
        and ast.unparse(n.test).startswith("self.use_vllm")
    )
    scope = _trl_scope()
    scope.update(
        math=math,
        self=SimpleNamespace(
            use_vllm=True,
            vllm_importance_sampling_correction=True,
            vllm_importance_sampling_mode=mode,
            vllm_importance_sampling_clip_min=None,
            vllm_importance_sampling_clip_max=cap,
        ),
        completion_mask=completion_mask,
        tool_mask=tool_mask,
        old_per_token_logps=old,
        sampling_per_token_logps=sampling,
    )
    _, path = _trl_source("trainer/grpo_trainer.py")
    exec(compile(ast.Module(body=[block], type_ignores=[]), path, "exec"), scope)  # noqa: S102 - TRL's source
    return scope["vllm_importance_sampling_ratio"]
