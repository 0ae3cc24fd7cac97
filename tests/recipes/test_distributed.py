"""The distributed recipes at world size 2 on CPU (gloo): equal to single device, exact resume, every
declared feature with its effect checked, and every feature's mutants killed.

Each recipe is launched once with torchrun (tests/recipes/dist_driver.py runs all its cases, checks
and mutant runs, in one process group); the per-case results are then checked here, one test per case.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import load_recipe  # tests/recipes/conftest.py (at import time: the module of this folder)
from qat_losses import FIRST_STEP_REL, assert_qat_losses_close  # tests/recipes
from safetensors.torch import load_file
from tiny_preference import VAL_EVERY_2  # tests/assets (on the path: tests/recipes/conftest.py)

from ftune import registry

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve().parent
GOLDENS = json.loads((HERE / "goldens" / "single_device.json").read_text())
# The distributed training recipes: recipe -> (its default config, the recipe whose losses it gives;
# None in the registry: its own run as a world of one, in-process).
RECIPES = {
    name: (r.default_config, r.same_losses_as or name)
    for name, r in registry.TRAINING.items()
    if r.distributed
}


def _one_device(recipe):
    """The single-device recipe of `recipe`'s variant: its tags without [dist], or None."""
    tags = registry.RECIPES[recipe].tags - {"dist"}
    return next((n for n, r in registry.TRAINING.items() if r.tags == tags), None)


# Fake-quantized recipes: their losses differ from their float sibling's (and equal it with QAT off);
# each maps to its single-device QAT sibling, if any.
QAT = {r: _one_device(r) for r in RECIPES if "qat" in registry.RECIPES[r].tags}
# Launched only under `-m matrix`, to keep CI under its 10 minutes on 2 cores (each launch is about
# 30 s of a worker): each differs from its parent recipe only by approved, tagged lines
# (tests/recipes/test_skeleton.py), and full_finetune_distributed, lora_dpo_distributed and their
# single-device siblings' goldens are checked in the default run.
MATRIX_ONLY = {"qat_distributed", "knowledge_distillation_distributed", "full_dpo_distributed"}


def cases(recipes):
    """The recipes as parameters, those of MATRIX_ONLY marked `matrix`."""
    return [pytest.param(r, marks=pytest.mark.matrix) if r in MATRIX_ONLY else r for r in recipes]


def features(recipe):
    return [f for f, v in registry.RECIPES[recipe].features.items() if v == registry.YES]


def launch_of(recipe):
    """Sends a test that reads one recipe's launch to the xdist worker holding it (tests/conftest.py
    groups the parametrized tests by their `recipe`), so that no launch runs twice."""
    return pytest.mark.xdist_group(f"{__name__}[{recipe}]")


def test_every_declared_feature_has_a_check():
    declared = {f for r in RECIPES for f in features(r)}
    assert declared <= set(_checks()), f"features without a check: {sorted(declared - set(_checks()))}"


def _checks():
    sys.path.insert(0, str(HERE))
    from features import CHECKS

    return CHECKS


def _mutants():
    sys.path.insert(0, str(HERE))
    from mutants import MUTANTS

    return MUTANTS


def mutant_cases(recipe):
    return [f"{f}@{m.name}" for f in features(recipe) for m in _mutants()[f]]


def _selected(request, test: str, recipe: str) -> bool:
    """Whether this session runs `test` for `recipe` (the matrix tests run with `-m matrix` only)."""
    return any(
        item.originalname == test
        and getattr(item, "callspec", None)
        and item.callspec.params.get("recipe") == recipe
        for item in request.session.items
    )


@pytest.fixture(scope="module")
def launched(tiny_checkpoint, tmp_path_factory, request):
    """recipe -> (results, workdir), launching each recipe's driver once (lazily), with the cases of the
    tests this session runs: the feature checks and mutants only when the matrix tests are selected."""
    cache = {}

    def get(recipe):
        if recipe not in cache:
            workdir = tmp_path_factory.mktemp(recipe)
            cases = ["losses", "optimizers", *SWAP_CHECKS]
            if _selected(request, "test_feature_at_world_size_2", recipe):
                cases += features(recipe)
            if _selected(request, "test_mutant_killed_at_world_size_2", recipe):
                cases += mutant_cases(recipe)
            if _selected(request, "test_split_losses_equal_single_device", recipe):
                cases += split_cases(recipe)
            if recipe in QAT:
                cases.append("qat_off")
            if recipe == "qat_lora_finetune_distributed":
                cases.append("qat_lora_base")
            if recipe == "lora_finetune_distributed":
                cases += ["resume_dropout"]
            if recipe == "full_finetune_distributed":
                cases.append("sigterm")
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                "2",
                str(HERE / "dist_driver.py"),
                recipe,
                RECIPES[recipe][0],
                str(workdir),
                str(tiny_checkpoint),
                *dict.fromkeys(cases),  # each case once (a swap check is a feature check too)
            ]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
            results_file = workdir / "results.json"
            assert results_file.exists(), f"driver failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
            cache[recipe] = (json.loads(results_file.read_text()), workdir)
        return cache[recipe]

    return get


@pytest.mark.matrix
@pytest.mark.parametrize("recipe, feature", [(r, f) for r in RECIPES for f in features(r)])
def test_feature_at_world_size_2(recipe, feature, launched):
    results, _ = launched(recipe)
    assert results.get(feature) == "ok", results.get(feature, "not run")


@pytest.mark.matrix
@pytest.mark.parametrize("recipe, case", [(r, c) for r in RECIPES for c in mutant_cases(r)])
def test_mutant_killed_at_world_size_2(recipe, case, launched):
    results, _ = launched(recipe)
    result = results.get(case, "not run")
    assert result.startswith("killed"), f"{recipe}: the {case.replace('@', ' check under mutant ')}: {result}"


@pytest.mark.parametrize("recipe", cases(RECIPES))
def test_losses_equal_single_device(recipe, launched):
    results, workdir = launched(recipe)
    assert results["losses"] == "ok", results["losses"]
    _assert_single_device_losses(recipe, workdir / "losses")


def split_cases(recipe):
    """The driver's cases of `recipe`'s runs split by tensor / context parallel at world size 2 (one row
    of 2 ranks reading the single-device batch): "losses_tp", "losses_cp", those its cells say YES to
    (tensor parallel not on a LoRA default config: a reward model's LoRA is refused)."""
    lora = (registry.method_of(RECIPES[recipe][0]) or "").startswith("lora")
    splits = (("tp", "tensor_parallel"), ("cp", "context_parallel"))
    return [f"losses_{s}" for s, f in splits if f in features(recipe) and not (s == "tp" and lora)]


@pytest.mark.matrix
@pytest.mark.parametrize("recipe, case", [(r, c) for r in RECIPES for c in split_cases(r)])
def test_split_losses_equal_single_device(recipe, case, launched):
    # A method's loss over whole sequences (DPO's summed log-probabilities, distillation's per-token
    # divergence, GRPO's per-sequence terms, a reward model's last-token score) at tp=2 or cp=2 equals
    # the single-device golden, within the tolerances of the FSDP2 run's comparison.
    results, workdir = launched(recipe)
    assert results[case] == "ok", results[case]
    _assert_single_device_losses(recipe, workdir / case)


def _assert_single_device_losses(recipe, logs_dir):
    from features import read_log

    got = [r["loss"] for r in read_log(logs_dir) if "loss" in r]
    single = GOLDENS[RECIPES[recipe][1]]
    if isinstance(single, dict):  # GRPO: its loss is ~0 at ratio 1; the gradients and rewards say more
        from test_grpo import assert_same_figures, figures

        assert_same_figures(figures(read_log(logs_dir)), single)
    elif recipe not in QAT:
        assert got == pytest.approx(single, rel=1e-5)
    else:
        assert got[0] != pytest.approx(single[0], rel=1e-6)  # fake quantization is on
        # The same fake-quantized model at step 1 (LoRA's B starts at zero), and for qat_distributed
        # the same run as qat_single_device's golden (tests/recipes/test_qat_single_device.py), up to
        # values that round to another code at world size 2 (tests/recipes/qat_losses.py).
        assert got[0] == pytest.approx(GOLDENS["qat_single_device"][0], rel=FIRST_STEP_REL)
        if QAT[recipe]:
            assert_qat_losses_close(got, GOLDENS[QAT[recipe]], single)


# The feature checks that swap a config's component for another (the optimizer for plain SGD) run at
# world size 2 in the default run too: a shipped default the swapped component cannot take under FSDP2
# (fused: true, issue 45) breaks them there, not only under -m matrix.
SWAP_CHECKS = ("grad_clipping",)


@pytest.mark.parametrize("recipe", cases(RECIPES))
def test_optimizers_swapped_in_step_or_are_refused_at_world_size_2(recipe, launched):
    """SGD and AdamW, fused and not, step every distributed recipe's sharded parameters twice, or are
    refused before the run (SGD's fused kernel has no sharding rule): tests/recipes/dist_driver.py."""
    results, _ = launched(recipe)
    assert results["optimizers"] == "ok", results["optimizers"]


@pytest.mark.parametrize("recipe", cases(RECIPES))
@pytest.mark.parametrize("check", SWAP_CHECKS)
def test_component_swapping_checks_at_world_size_2(recipe, check, launched):
    results, _ = launched(recipe)
    assert results[check] == "ok", results[check]


@launch_of("lora_finetune_distributed")
def test_resume_with_dropout_is_exact_at_world_size_2(launched):
    """Each rank's dropout draws follow its own batches, so each rank's RNG state is saved and restored."""
    results, _ = launched("lora_finetune_distributed")
    assert results["resume_dropout"] == "ok", results["resume_dropout"]


@pytest.mark.parametrize("recipe", cases(QAT))
def test_qat_with_fake_quant_off_equals_its_float_sibling(recipe, launched):
    results, workdir = launched(recipe)
    assert results["qat_off"] == "ok", results["qat_off"]
    from features import read_log

    got = [r["loss"] for r in read_log(workdir / "qat_off") if "loss" in r]
    assert got == pytest.approx(GOLDENS[RECIPES[recipe][1]], rel=1e-5)


@launch_of("full_finetune_distributed")
def test_sigterm_on_one_rank_stops_every_rank_at_the_same_step(launched):
    """Every rank saves its part of the same step folder and exits 143 (tests/recipes/dist_driver.py)."""
    results, _ = launched("full_finetune_distributed")
    assert results["sigterm"] == "ok", results["sigterm"]


@launch_of("qat_lora_finetune_distributed")
def test_qat_lora_base_is_frozen_and_fake_quantized(launched):
    results, _ = launched("qat_lora_finetune_distributed")
    assert results["qat_lora_base"] == "ok", results["qat_lora_base"]


# The saved weights are compared for the recipes whose losses equal their reference's exactly: not the
# fake-quantized ones (QAT) nor knowledge distillation (its student is saved by the same lines as full's).
SAME_CHECKPOINT = [r for r in RECIPES if r not in QAT and "kd" not in registry.RECIPES[r].tags]


@pytest.mark.parametrize("recipe", cases(SAME_CHECKPOINT))
def test_saved_checkpoint_equals_single_device(recipe, launched, run_recipe, tmp_path):
    results, workdir = launched(recipe)
    single = RECIPES[recipe][1]
    dpo = "dpo" in recipe
    val = VAL_EVERY_2 if dpo else ()  # as in tests/recipes/dist_driver.py's "losses" case
    logs, out = run_recipe(single, RECIPES[recipe][0], "max_steps=4", *val, output_dir=tmp_path / "single")
    from features import read_log

    dist_rows = read_log(workdir / "losses")
    dist_logs = [r for r in dist_rows if "loss" in r]
    if dpo:  # the DPO rewards are step means over the pairs of every rank
        # A reward is beta times a difference of two summed log-probabilities of about -100: float
        # rounding (batches of 4 rows per rank against 8) leaves about 1e-7 of it, whatever its size.
        for key in ("rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"):
            got, want = [r[key] for r in dist_logs], [r[key] for r in logs if "loss" in r]
            assert got == pytest.approx(want, rel=1e-5, abs=2e-6), key
        # The validation figures are means over the same 16 held-out pairs: every rank reads them all
        # (2 per batch against 4) and the sums are all-reduced, so world size 2 logs what one device does.
        got, want = ({r["step"]: r for r in rows if "val_loss" in r} for rows in (dist_rows, logs))
        assert sorted(got) == sorted(want) == [2, 4]
        for step in want:
            keys = sorted(k for k in want[step] if k.startswith("val_"))
            assert len(keys) == 7 and keys == sorted(k for k in got[step] if k.startswith("val_"))
            assert [got[step][k] for k in keys] == pytest.approx(
                [want[step][k] for k in keys], rel=1e-5, abs=2e-6
            )
    if "rm" in registry.RECIPES[recipe].tags:  # a reward model's figures: over the pairs of every rank
        for key in ("accuracy", "margin", "min_reward", "mean_reward", "max_reward"):
            got, want = [r[key] for r in dist_logs], [r[key] for r in logs if "loss" in r]
            assert got == pytest.approx(want, rel=1e-5, abs=2e-6), key
    adapter = (out / "step_4" / "adapter_model.safetensors").is_file()  # a LoRA run (a peft section)
    name = "adapter_model.safetensors" if adapter else "model.safetensors"
    a, b = load_file(str(out / "step_4" / name)), load_file(str(workdir / "losses" / "step_4" / name))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


@launch_of("qat_lora_finetune_distributed")
def test_qat_lora_convert_gives_a_quantized_model_that_eval_loads(launched, tiny_checkpoint, tmp_path):
    """The deployable QAT + LoRA model: the adapters merged into the base, prepared and converted."""
    from tiny_checkpoint import SIZES

    from ftune.checkpointing import load_hf
    from ftune.checkpointing.inference import load_quantized_model, merge_adapter_folder
    from ftune.config import load_config
    from ftune.evaluation import perplexity
    from ftune.models.smollm2 import smollm2_tokenizer
    from ftune.quantization import Int8DynActInt4Weight, enable_fake_quant

    _, workdir = launched("qat_lora_finetune_distributed")
    step = workdir / "losses" / "step_4"
    common = [f"checkpointer.checkpoint_dir={tiny_checkpoint}", "device=cpu", "dtype=fp32"]
    quantized = tmp_path / "quantized"
    load_recipe("quantize").main(
        load_config("quantization", [*common, f"adapter_dir={step}", "qat=true", f"output_dir={quantized}"])
    )
    model, metadata = load_quantized_model(quantized, device=torch.device("cpu"))
    assert metadata["qat"] is True and metadata["adapter_dir"] == str(step)
    q_proj = model.layers[0].attn.q_proj
    assert type(q_proj.weight).__name__ == "IntxUnpackedToInt8Tensor", type(q_proj.weight)

    # It computes the merged model under the fake quantization it trained with, nearly (real int4).
    merged = load_hf(tiny_checkpoint).eval()
    merged.load_state_dict(merge_adapter_folder(merged.state_dict(), step, family="smollm2"))
    Int8DynActInt4Weight(group_size=32).prepare(merged)
    enable_fake_quant(merged, True)
    tokens = torch.arange(40)[None] % SIZES["vocab_size"]
    with torch.no_grad():
        got, fake = model(tokens), merged(tokens)
    assert torch.nn.functional.cosine_similarity(got.flatten(), fake.flatten(), dim=0) > 0.999

    text = tmp_path / "doc.txt"
    text.write_text(" ".join(f"Rewrite the date 20{i:02d}-07-14 as DD/MM/YYYY." for i in range(12)))
    out = tmp_path / "eval.json"
    load_recipe("eval").main(
        load_config(
            "eval",
            [*common, f"tokenizer.path={tiny_checkpoint}", f"quantized_checkpoint={quantized}"]
            + [f"text_files=[{text}]", "heldout_file=null", "max_seq_len=32", f"output_file={out}"],
        )
    )
    got_ppl = json.loads(out.read_text())["perplexity"]
    want = perplexity(model, smollm2_tokenizer(tiny_checkpoint), [text.read_text()], max_seq_len=32)
    assert got_ppl["loglikelihood"] == want.loglikelihood and got_ppl["num_tokens"] == want.num_tokens
