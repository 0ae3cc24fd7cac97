import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from ftune import registry
from ftune.config import load_config
from ftune.config.trust import trust_packages

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "assets"))
# Component paths of the test helpers, as --trust would (torchrun ranks import this file too): the
# assets, and the mutants (a mutant replaces a component, e.g. ftune.peft.apply_lora, by a function
# defined in tests/recipes/mutants.py, which the resolved-object trust check sees).
trust_packages(["recipe_test_components", "mutants"])

from tiny_checkpoint import (  # noqa: E402
    TEACHER_SIZES,
    kd_overrides,
    make_talkative_checkpoint,
    make_tiny_checkpoint,
    tiny_overrides,
)
from tiny_grpo import AGENT_TINY, GRPO_TINY, REASONING_GYM_TINY, TEXTARENA_TINY  # noqa: E402
from tiny_preference import tiny_kto_overrides, tiny_preference_overrides  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from features import read_log  # noqa: E402
from ppo_parity_inputs import make_tiny_reward_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory) -> Path:
    """The KD tests' teacher: wider than tiny_checkpoint, other weights, the same tokenizer."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("teacher") / "ckpt", seed=1, sizes=TEACHER_SIZES)


@pytest.fixture(scope="session")
def tiny_reward_model(tiny_checkpoint, tmp_path_factory) -> Path:
    """The PPO runs' reward and value model: tiny_checkpoint's weights with a seeded score head."""
    return make_tiny_reward_model(
        tmp_path_factory.mktemp("rm") / "rm", tiny_checkpoint, torch.Generator().manual_seed(1)
    )


@pytest.fixture(scope="session")
def talkative_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The agent tests' checkpoint: tiny_checkpoint whose random model ends its turns often."""
    return make_talkative_checkpoint(tmp_path_factory.mktemp("talkative") / "ckpt", tiny_checkpoint)


def is_kd(config: str) -> bool:
    return (registry.method_of(config) or "").startswith("kd")


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo")


def load_recipe(name: str):
    """Import a shipped recipe file as a module (what `ftune run <name>` executes)."""
    path = registry.RECIPES[name].file
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def overrides_for(config: str, checkpoint: Path, data_dir: Path, output_dir: Path) -> list[str]:
    """The tiny-model overrides of a shipped config: preference data for the DPO methods and ORPO (but those on
    the demo task's pairs, smollm2/135M_demo_lora_dpo), unpaired data for KTO, the demo data otherwise (its
    prompts for GRPO)."""
    if registry.method_of(config) == "lora_kto":
        return tiny_kto_overrides(checkpoint, data_dir, output_dir)
    if registry.method_of(config) in ("lora_dpo", "full_dpo", "lora_orpo") and "_demo_" not in config:
        return tiny_preference_overrides(checkpoint, data_dir, output_dir)
    if "textarena" in config:  # its own game, prompts and rewards; small budgets
        tiny = tiny_overrides(checkpoint, data_dir, output_dir)
        return [o for o in tiny if not o.startswith("dataset")] + TEXTARENA_TINY
    if registry.method_of(config) == "lora_grpo_agent":  # the GRPO overrides, a scripted environment
        return [*tiny_overrides(checkpoint, data_dir, output_dir), *GRPO_TINY, *AGENT_TINY]
    if "reasoning_gym" in config:  # its own task's prompts and rewards; short completions
        tiny = tiny_overrides(checkpoint, data_dir, output_dir)
        return [o for o in tiny if not o.startswith("dataset")] + REASONING_GYM_TINY
    if registry.method_of(config) in ("lora_grpo", "full_grpo"):  # the demo prompts, a varied reward
        return [*tiny_overrides(checkpoint, data_dir, output_dir), *GRPO_TINY]
    return tiny_overrides(checkpoint, data_dir, output_dir)


@pytest.fixture
def run_recipe(tiny_checkpoint, demo_dir, tmp_path, request):
    """Run a recipe in this process on the tiny checkpoint; returns (per-step metrics, output_dir).

    A knowledge-distillation config also gets the tiny teacher (built on first use), an agent config the
    talkative checkpoint (its conversations take several turns)."""

    def run(recipe: str, config: str, *overrides: str, output_dir: Path | None = None):
        out = output_dir or tmp_path / "out"
        teacher = kd_overrides(request.getfixturevalue("tiny_teacher")) if is_kd(config) else []
        if registry.method_of(config) == "ppo":  # its reward and value model, short responses, a constant lr
            rm = request.getfixturevalue("tiny_reward_model")
            models = [f"{k}.checkpoint_dir={rm}" for k in ("reward_checkpointer", "value_checkpointer")]
            teacher = [*teacher, *models, "max_generated_tokens=6", "lr_scheduler.num_warmup_steps=0"]
        agent = registry.method_of(config) == "lora_grpo_agent"
        checkpoint = request.getfixturevalue("talkative_checkpoint") if agent else tiny_checkpoint
        cfg = load_config(config, [*overrides_for(config, checkpoint, demo_dir, out), *teacher, *overrides])
        load_recipe(recipe).main(cfg)
        return read_log(out), out

    return run
