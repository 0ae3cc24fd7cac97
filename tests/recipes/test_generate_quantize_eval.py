"""The generate, quantize and eval recipes end to end on the tiny seeded checkpoint, in this process.

Each recipe is checked against the library call it wraps: generate against ftune.generation.generate,
eval against ftune.evaluation.perplexity / exact_match, quantize against the quantizer applied in
process. The model sources (base, + adapter folder, quantized) are checked the same way.
"""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_checkpoint import tiny_overrides

from ftune import registry
from ftune.checkpointing import NativeCheckpointer, load_hf
from ftune.checkpointing.adapter import load_adapter
from ftune.checkpointing.inference import load_quantized_model, merge_adapter_folder, quantized_file
from ftune.checkpointing.model_build import meta_model
from ftune.config import load_config
from ftune.data.messages import Message
from ftune.datasets.demo import write_demo_data
from ftune.evaluation import exact_match, perplexity
from ftune.evaluation.chat_samples import read_chat_samples
from ftune.generation import generate
from ftune.generation.streaming import TextStreamer
from ftune.models.smollm2 import smollm2_tokenizer
from ftune.peft import apply_lora
from ftune.quantization import Int8DynActInt4Weight, Int8WeightOnly

PROMPT = "Rewrite the date 2023-07-14 in the format DD/MM/YYYY. Answer with the date only."
TEXT = " ".join(f"Rewrite the date 20{i:02d}-07-14 in the format DD/MM/YYYY." for i in range(12))


def load_recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", registry.RECIPES[name].file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint) -> Path:
    return tiny_checkpoint


@pytest.fixture
def run(ckpt):
    """Run a recipe on the tiny checkpoint; returns nothing (read stdout, files)."""

    def run(recipe: str, config: str, *overrides: str) -> None:
        base = [f"checkpointer.checkpoint_dir={ckpt}", "device=cpu", "dtype=fp32"]
        if recipe != "quantize":
            base.append(f"tokenizer.path={ckpt}")
        load_recipe(recipe).main(load_config(config, [*base, *overrides]))

    return run


@pytest.fixture(scope="module")
def tokenizer(ckpt):
    return smollm2_tokenizer(ckpt)


@pytest.fixture(scope="module")
def float_model(ckpt):
    return load_hf(ckpt).eval()


def chat_prompt(tokenizer, text: str = PROMPT) -> list[int]:
    return tokenizer.tokenize_messages([Message("user", text)], add_eos=False, add_generation_prompt=True)[0]


@pytest.fixture(scope="module")
def lora_step(ckpt, tmp_path_factory) -> Path:
    """A step folder of lora_finetune_single_device on the tiny checkpoint, adapter made clearly non-zero."""
    root = tmp_path_factory.mktemp("lora")
    cfg = load_config(
        "smollm2/135M_lora", [*tiny_overrides(ckpt, root / "data", root / "out"), "max_steps=1"]
    )
    load_recipe("lora_finetune_single_device").main(cfg)
    step = root / "out" / "step_1"
    peft = load_file(str(step / "adapter_model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    # One training step leaves lora_B tiny; a large B makes the adapter change greedy tokens for sure.
    peft = {k: torch.randn(v.shape, generator=gen) * 0.5 if "lora_B" in k else v for k, v in peft.items()}
    save_file(peft, str(step / "adapter_model.safetensors"))
    return step


@pytest.fixture(scope="module")
def quantized_dir(ckpt, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quantized")
    base = [f"checkpointer.checkpoint_dir={ckpt}", f"output_dir={out}"]
    load_recipe("quantize").main(load_config("quantization", base))
    return out


# ---- generate ----------------------------------------------------------------------------------


def test_generate_streams_the_same_greedy_tokens_as_the_library(run, float_model, tokenizer, capsys):
    expected = generate(
        float_model, chat_prompt(tokenizer), max_new_tokens=12, stop_tokens=tokenizer.stop_tokens
    )
    run("generate", "generation", f"prompt={PROMPT!r}", "max_new_tokens=12")
    out, err = capsys.readouterr()
    assert out == tokenizer.decode(expected) + "\n"
    assert f"{len(expected)} tokens in" in err and "tokens/s" in err


def test_generate_raw_text_and_sampling(run, float_model, tokenizer, capsys):
    ids = tokenizer.encode("Rewrite the date", add_bos=True, add_eos=False)
    kwargs = dict(
        max_new_tokens=8, temperature=0.8, top_k=20, top_p=0.9, seed=3, stop_tokens=tokenizer.stop_tokens
    )
    expected = generate(float_model, ids, **kwargs)
    run(
        "generate",
        "generation",
        "prompt='Rewrite the date'",
        "chat=false",
        "max_new_tokens=8",
        "temperature=0.8",
    )
    out = capsys.readouterr().out
    run(
        "generate",
        "generation",
        "prompt='Rewrite the date'",
        "chat=false",
        "max_new_tokens=8",
        "temperature=0.8",
        "top_k=20",
        "top_p=0.9",
        "seed=3",
    )
    assert capsys.readouterr().out == tokenizer.decode(expected) + "\n" != out


def test_generate_with_adapter_folder_equals_the_unmerged_lora_model(run, lora_step, ckpt, tokenizer, capsys):
    lora = load_hf(ckpt).eval()
    settings = json.loads((lora_step / "adapter_config.json").read_text())
    apply_lora(lora, targets=settings["target_modules"], rank=settings["r"], alpha=settings["lora_alpha"])
    result = lora.load_state_dict(load_adapter(lora_step, family="smollm2"), strict=False)
    assert not result.unexpected_keys
    expected = generate(lora, chat_prompt(tokenizer), max_new_tokens=10, stop_tokens=tokenizer.stop_tokens)

    run("generate", "generation", f"prompt={PROMPT!r}", "max_new_tokens=10")
    base = capsys.readouterr().out
    run("generate", "generation", f"prompt={PROMPT!r}", "max_new_tokens=10", f"adapter_dir={lora_step}")
    adapted = capsys.readouterr().out
    assert adapted == tokenizer.decode(expected) + "\n"
    assert adapted != base


def test_streamer_writes_whole_characters_and_the_full_text(tokenizer):
    text = "día ünd 日本\nnext line"
    ids = tokenizer.encode(text, add_bos=False, add_eos=False)
    pieces: list[str] = []
    streamer = TextStreamer(tokenizer, pieces.append)
    for token in [*ids, tokenizer.eos_id]:
        streamer.put(token)
    assert streamer.end() == "".join(pieces) == tokenizer.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)


# ---- quantize ----------------------------------------------------------------------------------


def test_quantize_writes_a_checkpoint_close_to_float(quantized_dir, float_model, ckpt, capsys):
    for name in ("model.pt", "config.json", "ftune_meta.json", "tokenizer.json", "tokenizer_config.json"):
        assert (quantized_dir / name).is_file(), name
    model, metadata = load_quantized_model(quantized_dir, device=torch.device("cpu"))
    assert metadata["family"] == "smollm2" and metadata["qat"] is False
    assert metadata["hf_config"] == json.loads((ckpt / "config.json").read_text())
    assert metadata["quantizer"] == Int8DynActInt4Weight(group_size=32).spec()
    assert type(model.layers[0].attn.q_proj.weight).__name__ == "IntxUnpackedToInt8Tensor"
    tokens = torch.arange(40)[None] % 300
    with torch.no_grad():
        got, want = model(tokens), float_model(tokens)
    assert not torch.equal(got, want)
    assert (
        torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.95
    )  # 4-bit weights: close, not equal
    # The folder is a native checkpoint too.
    loaded = NativeCheckpointer(quantized_dir).load()  # read-only
    assert loaded.family == "smollm2" and loaded.model.keys() == model.state_dict().keys()


def test_generate_and_eval_load_the_quantized_checkpoint(run, quantized_dir, tokenizer, tmp_path, capsys):
    model, _ = load_quantized_model(quantized_dir / "model.pt", device=torch.device("cpu"))
    expected = generate(model, chat_prompt(tokenizer), max_new_tokens=8, stop_tokens=tokenizer.stop_tokens)
    run(
        "generate",
        "generation",
        f"prompt={PROMPT!r}",
        "max_new_tokens=8",
        f"quantized_checkpoint={quantized_dir}",
    )
    assert capsys.readouterr().out == tokenizer.decode(expected) + "\n"

    text = tmp_path / "doc.txt"
    text.write_text(TEXT)
    want = perplexity(model, tokenizer, [TEXT], max_seq_len=32)
    run(
        "eval",
        "eval",
        f"text_files=[{text}]",
        "heldout_file=null",
        "max_seq_len=32",
        f"quantized_checkpoint={quantized_dir}",
        f"output_file={tmp_path / 'q.json'}",
    )
    got = json.loads((tmp_path / "q.json").read_text())["perplexity"]
    assert got["loglikelihood"] == want.loglikelihood and got["num_tokens"] == want.num_tokens


def test_quantize_qat_convert_equals_prepare_then_convert_in_process(run, ckpt, tmp_path, capsys):
    run("quantize", "quantization", "qat=true", f"output_dir={tmp_path}")
    assert "QAT-converted 14 linear layers" in capsys.readouterr().out
    model, metadata = load_quantized_model(tmp_path, device=torch.device("cpu"))
    assert metadata["qat"] is True
    reference = load_hf(ckpt).eval()
    quantizer = Int8DynActInt4Weight(group_size=32)
    quantizer.prepare(reference)
    quantizer.convert(reference)
    tokens = torch.arange(24)[None]
    with torch.no_grad():
        assert torch.equal(model(tokens), reference(tokens))


def test_quantize_merges_an_adapter_first(run, lora_step, ckpt, tmp_path):
    run(
        "quantize",
        "quantization",
        f"adapter_dir={lora_step}",
        f"output_dir={tmp_path}",
        "quantizer=ftune.quantization.Int8WeightOnly",
        "~quantizer.group_size",
    )
    model, metadata = load_quantized_model(tmp_path, device=torch.device("cpu"))
    assert metadata["adapter_dir"] == str(lora_step)
    merged = load_hf(ckpt).eval()
    state = merge_adapter_folder(merged.state_dict(), lora_step, family="smollm2")
    merged.load_state_dict(state)
    Int8WeightOnly().quantize(merged)
    tokens = torch.arange(24)[None]
    with torch.no_grad():
        assert torch.equal(model(tokens), merged(tokens))


# ---- eval --------------------------------------------------------------------------------------


def test_eval_perplexity_and_exact_match_equal_the_library(run, float_model, tokenizer, tmp_path, capsys):
    text = tmp_path / "doc.txt"
    text.write_text(TEXT)
    data = tmp_path / "demo"
    heldout = data / "heldout.jsonl"  # missing: demo_data_if_missing writes it
    prompts = [PROMPT.replace("14", str(day)) for day in (11, 12)]
    # A record whose reference is the model's own greedy answer: exact match must count it.
    answer = generate(float_model, chat_prompt(tokenizer, prompts[0]), max_new_tokens=6)
    answer = tokenizer.decode([t for t in answer if t not in tokenizer.stop_tokens])
    own = tmp_path / "own.jsonl"
    records = [(prompts[0], answer), (prompts[1], "02/07/1999")]
    lines = [
        {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": a}]}
        for p, a in records
    ]
    own.write_text("".join(json.dumps(line) + "\n" for line in lines))

    run(
        "eval",
        "eval",
        f"text_files=[{text}]",
        f"heldout_file={heldout}",
        "limit=3",
        "max_seq_len=32",
        "stride=16",
        "batch_size=2",
        f"output_file={tmp_path / 'r.json'}",
    )
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "r.json").read_text())
    want = perplexity(float_model, tokenizer, [TEXT], max_seq_len=32, stride=16, batch_size=2)
    assert result["perplexity"]["word_perplexity"] == want.word_perplexity
    assert result["perplexity"]["bits_per_byte"] == want.bits_per_byte
    assert f"{want.byte_perplexity:.4f}" in out and "exact_match" in out
    samples = read_chat_samples(heldout, limit=3)
    budget = 4 + max(len(tokenizer.encode(r, add_bos=False, add_eos=False)) for _, r in samples)
    em = exact_match(float_model, tokenizer, samples, max_new_tokens=budget, batch_size=2)
    got = result["exact_match"]
    assert heldout.is_file() and got["num_total"] == 3 and got["max_new_tokens"] == budget
    assert [s["prediction"] for s in got["samples"]] == em.predictions

    run("eval", "eval", f"heldout_file={own}", "max_new_tokens=6", f"output_file={tmp_path / 'own.json'}")
    got = json.loads((tmp_path / "own.json").read_text())["exact_match"]
    assert [s["correct"] for s in got["samples"]] == [True, False] and got["accuracy"] == 0.5


# ---- every user-facing error -------------------------------------------------------------------


def test_recipe_errors(run, lora_step, quantized_dir, tmp_path):
    with pytest.raises(ValueError, match="prompt is not set: pass it on the command line"):
        run("generate", "generation")
    with pytest.raises(ValueError, match="system is set but chat=false"):
        run("generate", "generation", "prompt=x", "system=y", "chat=false")
    with pytest.raises(ValueError, match="adapter_dir .* and quantized_checkpoint .* cannot be combined"):
        run(
            "generate",
            "generation",
            "prompt=x",
            f"adapter_dir={lora_step}",
            f"quantized_checkpoint={quantized_dir}",
        )
    with pytest.raises(
        ValueError,
        match="nothing to evaluate: text_files and lm_eval_tasks are empty and heldout_file is null",
    ):
        run("eval", "eval", "heldout_file=null")
    with pytest.raises(FileNotFoundError, match=r"text_files: \[.*nope.txt'\] do not exist"):
        run("eval", "eval", f"text_files=[{tmp_path / 'nope.txt'}]")
    with pytest.raises(FileNotFoundError, match="heldout_file .*heldout.jsonl' does not exist"):
        run(
            "eval",
            "eval",
            f"heldout_file={tmp_path / 'demo' / 'heldout.jsonl'}",
            "demo_data_if_missing=false",
        )


def test_model_loading_errors(ckpt, lora_step, tmp_path):
    with pytest.raises(ValueError, match="has no config.json, so the model architecture is unknown"):
        meta_model(tmp_path, dtype=torch.float32)
    base = load_hf(ckpt).state_dict()
    with pytest.raises(FileNotFoundError, match="adapter_dir .* holds no adapter_model.safetensors"):
        merge_adapter_folder(base, ckpt, family="smollm2")
    with pytest.raises(
        ValueError, match="does not fit the base model: layers.0.attn.q_proj: adapter gives shape"
    ):
        merge_adapter_folder(
            {**base, "layers.0.attn.q_proj.weight": torch.zeros(8, 8)}, lora_step, family="smollm2"
        )
    config = json.loads((lora_step / "adapter_config.json").read_text())
    rs = tmp_path / "rslora"
    rs.mkdir()
    (rs / "adapter_model.safetensors").write_bytes((lora_step / "adapter_model.safetensors").read_bytes())
    (rs / "adapter_config.json").write_text(json.dumps({**config, "use_rslora": True}))
    with pytest.raises(ValueError, match="sets use_rslora=true"):
        merge_adapter_folder(base, rs, family="smollm2")
    with pytest.raises(
        FileNotFoundError, match="quantized_checkpoint .* is neither a quantized checkpoint file nor"
    ):
        quantized_file(tmp_path)


def test_chat_sample_errors(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    with pytest.raises(ValueError, match=r"h.jsonl:1: expected \{\"messages\""):
        read_chat_samples(path)
    path.write_text("\n{not json\n")
    with pytest.raises(ValueError, match=r"h.jsonl:2: not valid JSON"):
        read_chat_samples(path)
    path.write_text("\n")
    with pytest.raises(ValueError, match="holds no records"):
        read_chat_samples(path)
    write_demo_data(tmp_path, n_train=3, n_heldout=5)
    samples = read_chat_samples(tmp_path / "heldout.jsonl", limit=2)
    assert len(samples) == 2 and samples[0][0][0].role == "user" and "/" in samples[0][1]
