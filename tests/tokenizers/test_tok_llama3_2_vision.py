"""Llama 3.2 Vision's tokenizer: Llama 3's with `<|image|>` after its 256 special tokens (128256 in the
released vocabulary, the model's image_token_index; datasets write it by id, never by encoding text)."""

from tiny_tokenizer_files import tiny_ranks

from ftune.models.llama3 import llama3_tokenizer
from ftune.models.llama3_2_vision import llama3_2_vision_tokenizer


def test_image_token_follows_llama3s_special_tokens(ranks_file):
    tok, text = llama3_2_vision_tokenizer(ranks_file), llama3_tokenizer(ranks_file)
    base = len(tiny_ranks())
    assert tok.token_to_id("<|image|>") == base + 256
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (text.bos_id, text.eos_id, text.pad_id)
    assert tok.encode("hi", add_bos=False, add_eos=False) == text.encode("hi", add_bos=False, add_eos=False)
