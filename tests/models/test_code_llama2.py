"""code_llama2 against `transformers`' LlamaForCausalLM with Code Llama's RoPE base on tiny random models
(the KV cache, packed documents, long sequences; the base detected from config.json and non-vacuous),
Meta's consolidated layout round trip, the tokenizer, and the builders against torchtune's numbers."""

import sys
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf

from ftune.checkpointing import load_hf
from ftune.models import CONVERTERS, code_llama2, family_from_hf_config
from ftune.modules.masks import document_causal_mask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tokenizers"))
from tiny_tokenizer_files import CORPUS, train_sp  # noqa: E402

VOCAB = 128
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(path: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    hf = build_tiny_hf("code_llama2")
    hf.save_pretrained(path)
    return hf, load_hf(path).eval()


def test_rope_base_is_detected_and_changes_the_logits(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    assert family_from_hf_config(hf.config.to_dict()) == "code_llama2"
    assert model.layers[0].attn.rope.base == 1_000_000.0
    tokens = _tokens((1, 160), seed=1)
    with torch.no_grad():
        assert (model(tokens) - hf(tokens).logits).abs().max().item() <= 1e-4
        llama2_base = build_tiny_hf("code_llama2", rope_theta=10_000.0)(tokens).logits
    assert (llama2_base - hf(tokens).logits).abs().max() > 1e-3  # torchtune's builders kept 10,000


def test_kv_cache_and_packed_documents_match_transformers(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    tokens = _tokens((1, 44), seed=2)
    with torch.no_grad():
        expected = hf(tokens).logits[0]
        docs = [_tokens((1, n), seed=3 + n) for n in (17, 23)]
        doc_ids = torch.cat([torch.full((n.shape[1],), i) for i, n in enumerate(docs)])[None]
        input_pos = torch.cat([torch.arange(d.shape[1]) for d in docs])[None]
        packed = model(torch.cat(docs, 1), input_pos=input_pos, mask=document_causal_mask(doc_ids))
        separate = torch.cat([hf(d).logits for d in docs], dim=1)
        model.setup_caches(batch_size=1, max_seq_len=64)
        prefill = model(tokens[:, :20], input_pos=torch.arange(20)[None])[0]
        steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))[0, 0] for i in range(20, 44)]
    assert (torch.cat([prefill, torch.stack(steps)]) - expected).abs().max().item() <= 1e-4
    assert (packed - separate).abs().max().item() <= 1e-4


def test_meta_round_trip_is_exact() -> None:
    sd = CONVERTERS["code_llama2"].hf_to_ftune(build_tiny_hf("code_llama2").state_dict())
    conv = CONVERTERS["code_llama2"]
    meta = conv.ftune_to_meta(sd, num_heads=4, num_kv_heads=2)
    assert "layers.0.attention.wq.weight" in meta
    back = conv.meta_to_ftune(meta, num_heads=4, num_kv_heads=2)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)


def test_tokenizer_reads_the_sentencepiece_model(tmp_path: Path) -> None:
    import sentencepiece as spm

    model_file = train_sp(tmp_path / "tokenizer", vocab_size=120)
    tok = code_llama2.code_llama2_tokenizer(tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    for text in CORPUS[:3]:
        assert tok.encode(text, add_eos=False) == [1, *sp.encode(text)]


@pytest.mark.parametrize(
    "builder, layers, kv, vocab",
    [
        ("code_llama2_7b", 32, 32, 32_016),
        ("code_llama2_13b", 40, 40, 32_016),
        ("code_llama2_70b", 80, 8, 32_016),
    ],
)
def test_builders_have_torchtunes_sizes_and_code_llamas_rope(
    builder: str, layers: int, kv: int, vocab: int
) -> None:
    with torch.device("meta"):
        model = getattr(code_llama2, builder)()
    assert len(model.layers) == layers and model.layers[0].attn.num_kv_heads == kv
    assert model.tok_embeddings.weight.shape[0] == vocab and model.max_seq_len == 16_384
    assert model.layers[0].attn.rope.base == 1_000_000.0
