"""The lm-evaluation-harness bridge: ftune's model scores a task as lm-eval's own HF model does.

Three local tasks (YAML over jsonl written here, nothing from the network) cover the request
types: multiple choice (loglikelihood), generation until stop strings (generate_until, KV cache)
and per-document perplexity over several windows (loglikelihood_rolling). The same tiny
checkpoint goes through `lm_eval.models.huggingface.HFLM` (transformers) and through
`FtuneLM` (ftune's decoder and tokenizer): same accuracies and generations, log-likelihoods
within 1e-4. The eval recipe's lm-eval mode is checked against the same run, and the message
when lm_eval is missing is pinned.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftune import registry
from ftune.checkpointing import load_hf
from ftune.config import load_config
from ftune.evaluation import harness
from ftune.generation import generate
from ftune.models.smollm2 import smollm2_tokenizer

pytest.importorskip("lm_eval")
pytest.importorskip("transformers")


def load_recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", registry.RECIPES[name].file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TASKS = ["ftune_mc", "ftune_gen", "ftune_ppl"]
MAX_LENGTH = 48  # short, so that rolling windows and left truncation happen
UNTIL = ["\n", "/20"]


def date(i: int) -> tuple[str, str, str]:
    return f"20{i:02d}", f"0{i % 9 + 1}", f"1{i % 10}"


def yaml_task(name: str, data: Path, cache: Path, body: str) -> str:
    return (
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        f"  cache_dir: {cache}\ntest_split: test\n{body}"
    )


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """Nothing may reach the hub (datasets and huggingface_hub read these flags at import, so patch both)."""
    import datasets.config
    import huggingface_hub.constants

    mp = pytest.MonkeyPatch()
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        mp.setenv(var, "1")
    mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    mp.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny checkpoint with a BOS token its tokenizer names but never prepends (as SmolLM2's):
    lm-eval conditions rolling windows on it, not on EOS."""
    folder = tmp_path_factory.mktemp("bos") / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "bos_token": "<|im_start|>"}))
    return folder


@pytest.fixture(scope="module")
def task_dir(ckpt, tmp_path_factory, offline) -> Path:
    root = tmp_path_factory.mktemp("lm_eval_tasks")
    tokenizer = smollm2_tokenizer(ckpt)
    model = load_hf(ckpt).eval()
    mc, gen, ppl = [], [], []
    for i in range(8):
        y, m, d = date(i)
        prompt = f"Rewrite the date {y}-{m}-{d} in the format DD/MM/YYYY:"
        mc.append(
            {
                "question": prompt,
                "choices": [f" {d}/{m}/{y}", f" {m}/{d}/{y}", f" {y}/{m}/{d}"],
                "label": i % 3,
            }
        )
    for i in range(6):
        y, m, d = date(i)
        prompt = f"user\nRewrite the date {y}-{m}-{d} as DD/MM/YYYY.\nassistant\n"
        # Half the references are the model's own greedy answer, so exact match is neither 0 nor 1.
        answer = generate(
            model,
            tokenizer.encode(prompt, add_eos=False),
            max_new_tokens=10,
            stop_tokens=tokenizer.stop_tokens,
        )
        own = tokenizer.decode([t for t in answer if t not in tokenizer.stop_tokens])
        for stop in UNTIL:
            own = own.split(stop)[0]
        gen.append({"prompt": prompt, "answer": own if i % 2 else f"{d}/{m}/{y}"})
    for i in range(3):
        ppl.append(
            {
                "text": " ".join(
                    f"Rewrite the date 20{j:02d}-0{i + 1}-14 as DD/MM/YYYY." for j in range(2 + 3 * i)
                )
            }
        )
    for name, rows in (("mc", mc), ("gen", gen), ("ppl", ppl)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache = root / "hf_cache"
    metrics = "metric_list:\n" + "".join(f"  - metric: {m}\n" for m in ("acc", "acc_norm"))
    (root / "mc.yaml").write_text(
        yaml_task("ftune_mc", root / "mc.jsonl", cache, "output_type: multiple_choice\n")
        + 'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\n'
        + metrics
    )
    (root / "gen.yaml").write_text(
        yaml_task("ftune_gen", root / "gen.jsonl", cache, "output_type: generate_until\n")
        + 'doc_to_text: "{{prompt}}"\ndoc_to_target: "{{answer}}"\n'
        + f"generation_kwargs:\n  until: {json.dumps(UNTIL)}\n  max_gen_toks: 10\n  do_sample: false\n"
        + "metric_list:\n  - metric: exact_match\n"
    )
    (root / "ppl.yaml").write_text(
        yaml_task("ftune_ppl", root / "ppl.jsonl", cache, "output_type: loglikelihood_rolling\n")
        + 'doc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n'
        + "".join(f"  - metric: {m}\n" for m in ("word_perplexity", "byte_perplexity", "bits_per_byte"))
    )
    return root


def evaluate(lm, task_dir: Path, **kwargs) -> dict:
    from lm_eval import simple_evaluate

    manager = harness.task_manager(str(task_dir), builtin_tasks=False)
    return simple_evaluate(model=lm, tasks=TASKS, task_manager=manager, log_samples=True, **kwargs)


@pytest.fixture(scope="module")
def reference(ckpt, task_dir) -> dict:
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(ckpt), device="cpu", dtype="float32", batch_size=4, max_length=MAX_LENGTH)
    return evaluate(lm, task_dir)


@pytest.fixture(scope="module")
def ours(ckpt, task_dir) -> dict:
    from ftune.evaluation.lm_eval_model import FtuneLM

    model, tokenizer = load_hf(ckpt).eval(), smollm2_tokenizer(ckpt)
    return evaluate(FtuneLM(model, tokenizer, batch_size=3, max_length=MAX_LENGTH), task_dir)


def responses(results: dict, task: str) -> list:
    return [sample["resps"] for sample in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def test_multiple_choice_matches_lm_evals_hf_model(reference, ours):
    want, got = reference["results"]["ftune_mc"], ours["results"]["ftune_mc"]
    assert got["acc,none"] == want["acc,none"] and got["acc_norm,none"] == want["acc_norm,none"]
    assert 0 < want["acc,none"] < 1  # a score that could differ
    pairs = [
        (w[0], g[0])
        for ws, gs in zip(responses(reference, "ftune_mc"), responses(ours, "ftune_mc"))
        for w, g in zip(ws, gs)
    ]
    assert len(pairs) == 8 * 3
    for (want_ll, want_greedy), (got_ll, got_greedy) in pairs:
        assert got_ll == pytest.approx(want_ll, abs=1e-4) and got_greedy == want_greedy


def test_generation_matches_lm_evals_hf_model(reference, ours):
    want, got = responses(reference, "ftune_gen"), responses(ours, "ftune_gen")
    assert got == want
    texts = [r[0][0] for r in want]
    assert any(len(t) > 0 for t in texts) and len(set(texts)) > 1
    score = reference["results"]["ftune_gen"]["exact_match,none"]
    assert ours["results"]["ftune_gen"]["exact_match,none"] == score and 0 < score < 1


def test_rolling_loglikelihood_matches_lm_evals_hf_model(reference, ours, ckpt, task_dir):
    want, got = responses(reference, "ftune_ppl"), responses(ours, "ftune_ppl")
    for w, g in zip(want, got):
        assert g[0] == pytest.approx(w[0], abs=1e-4)
    # The longest document spans several windows of MAX_LENGTH tokens.
    tokenizer = smollm2_tokenizer(ckpt)
    from ftune.evaluation.lm_eval_model import FtuneLM

    prefix = FtuneLM(load_hf(ckpt), tokenizer).prefix_token_id  # the named BOS, as lm-eval's HF model
    assert tokenizer.bos_id is None and prefix == tokenizer.token_to_id("<|im_start|>") != tokenizer.eos_id
    longest = max(json.loads(line)["text"] for line in (task_dir / "ppl.jsonl").read_text().splitlines())
    assert len(tokenizer.encode(longest, add_bos=False, add_eos=False)) > 3 * MAX_LENGTH
    for metric in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
        assert ours["results"]["ftune_ppl"][metric] == pytest.approx(
            reference["results"]["ftune_ppl"][metric], rel=1e-5
        )


def test_eval_recipe_runs_lm_eval_tasks(ckpt, task_dir, ours, tmp_path, capsys):
    out = tmp_path / "eval.json"
    overrides = [
        f"checkpointer.checkpoint_dir={ckpt}",
        f"tokenizer.path={ckpt}",
        "heldout_file=null",
        f"lm_eval_tasks=[{','.join(TASKS)}]",
        f"lm_eval_include_path={task_dir}",
        "lm_eval_builtin_tasks=false",
        f"lm_eval_max_length={MAX_LENGTH}",
        "batch_size=5",
        f"output_file={out}",
    ]
    load_recipe("eval").main(load_config("eval", overrides))
    printed = capsys.readouterr().out
    got = json.loads(out.read_text())["lm_eval"]
    for task in TASKS:
        want = {k: float(v) for k, v in ours["results"][task].items() if isinstance(v, float)}
        scores = {k: v for k, v in got["results"][task].items() if isinstance(v, float)}
        assert want and scores == pytest.approx(want, rel=1e-6)
    acc = got["results"]["ftune_mc"]["acc,none"]
    assert re.search(rf"\n  ftune_mc acc +{acc:.4f} ± 0\.\d{{4}}\n", printed), printed
    assert "sample_len" not in printed
    assert "ftune_ppl word_perplexity" in printed and "lm_eval_time" in printed

    # num_fewshot and limit reach lm-eval.
    overrides[3:4] = ["lm_eval_tasks=[ftune_mc]", "lm_eval_num_fewshot=1", "lm_eval_limit=2"]
    load_recipe("eval").main(load_config("eval", overrides))
    got = json.loads(out.read_text())["lm_eval"]
    assert got["n-shot"] == {"ftune_mc": 1} and got["n-samples"]["ftune_mc"]["effective"] == 2


def test_eval_recipe_lm_eval_errors(ckpt, task_dir, tmp_path):
    base = [
        f"checkpointer.checkpoint_dir={ckpt}",
        f"tokenizer.path={ckpt}",
        "heldout_file=null",
    ]
    main = load_recipe("eval").main
    with pytest.raises(
        ValueError, match=r"lm_eval_tasks: \['ftune_mcc'\] are not tasks.* Did you mean 'ftune_mc'\?"
    ):
        main(
            load_config(
                "eval",
                [
                    *base,
                    "lm_eval_tasks=[ftune_mcc]",
                    f"lm_eval_include_path={task_dir}",
                    "lm_eval_builtin_tasks=false",
                ],
            )
        )
    with pytest.raises(FileNotFoundError, match="lm_eval_include_path: .*nope' is not a folder"):
        main(load_config("eval", [*base, "lm_eval_tasks=[x]", f"lm_eval_include_path={tmp_path / 'nope'}"]))
    with pytest.raises(ValueError, match="lm_eval_builtin_tasks is false and lm_eval_include_path is null"):
        main(load_config("eval", [*base, "lm_eval_tasks=[x]", "lm_eval_builtin_tasks=false"]))


def test_missing_lm_eval_is_one_line_saying_what_to_install(ckpt):
    # A fresh interpreter where `import lm_eval` fails: ftune and the eval recipe still import,
    # and asking for lm-eval tasks stops before the model loads, with one line and no traceback.
    code = "import sys; sys.modules['lm_eval'] = None; from ftune.cli.main import main; sys.exit(main())"
    args = ["run", "eval", "--config", "eval", f"checkpointer.checkpoint_dir={ckpt}/missing"]
    args += [f"tokenizer.path={ckpt}", "heldout_file=null", "lm_eval_tasks=[hellaswag]"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert (
        "lm_eval_tasks needs lm-evaluation-harness, which is not installed: pip install 'ftune[lm-eval]' "
        "(or pip install 'lm_eval>=0.4'), or set lm_eval_tasks=[]." in proc.stderr
    ), proc.stderr


def test_a_task_name_typo_is_refused_before_the_model_loads(ckpt):
    """The checkpoint folder does not exist: the typo must be what stops the run (the model never loads)."""
    main = load_recipe("eval").main
    args = [f"checkpointer.checkpoint_dir={ckpt}/missing", f"tokenizer.path={ckpt}", "heldout_file=null"]
    with pytest.raises(
        ValueError, match=r"lm_eval_tasks: \['hellaswg'\] are not tasks.* Did you mean 'hellaswag'\?"
    ):
        main(load_config("eval", [*args, "lm_eval_tasks=[hellaswg]"]))


def test_the_yaml_scan_finds_declared_names_without_lm_evals_index(tmp_path):
    from ftune.evaluation.task_names import declared_names, unknown_by_scan

    (tmp_path / "a.yaml").write_text("task: one\ntag: [two, 'three']\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g.yaml").write_text("group: four\ntask:\n  - five\n  - task: six\nmetric_list: []\n")
    assert declared_names([tmp_path]) >= {"one", "two", "three", "four", "five", "six"}
    assert unknown_by_scan(["one", "six", "seven"], str(tmp_path), builtin_tasks=False) == ["seven"]
    assert unknown_by_scan(["hellaswag", "arc_easy", "mmlu"], None, builtin_tasks=True) == []
