"""Exact-match accuracy through batched greedy generation."""

import pytest

from ftune.data.messages import Message
from ftune.evaluation import exact_match, normalize_whitespace, prompt_tokens
from ftune.generation import generate
from ftune.modules.transformer import TransformerDecoder

QUESTIONS = ["What is 2+2?", "Name a colour.", "Capital of France?", "hi", "Say yes."]


def conversation(question: str) -> list[Message]:
    return [Message("system", "Answer briefly."), Message("user", question)]


def test_prompt_ends_with_the_assistant_header(tokenizer) -> None:
    ids = prompt_tokens(tokenizer, [Message("user", "hi")])
    start, end = 256, 257
    assert ids == [start, *b"user\nhi", end, *b"\n", start, *b"assistant\n"]


def test_accuracy_counts_matching_answers(model: TransformerDecoder, tokenizer) -> None:
    # Reference answers: what the model says, one prompt at a time, for 3 of the 5 questions.
    alone = []
    for q in QUESTIONS:
        out = generate(model, prompt_tokens(tokenizer, conversation(q)), max_new_tokens=4)
        alone.append(tokenizer.decode(out))
    references = [alone[0], "wrong", alone[2], "also wrong", alone[4]]
    samples = [(conversation(q), r) for q, r in zip(QUESTIONS, references)]
    result = exact_match(model, tokenizer, samples, max_new_tokens=4, batch_size=2, normalize=None)
    assert result.predictions == alone  # batched (2 + 2 + 1) equals one by one
    assert result.correct == [True, False, True, False, True]
    assert (result.num_correct, result.num_total, result.accuracy) == (3, 5, 0.6)


def test_answers_end_before_the_stop_token(model: TransformerDecoder, tokenizer) -> None:
    prompt = prompt_tokens(tokenizer, conversation(QUESTIONS[0]))
    free = generate(model, prompt, max_new_tokens=8)
    tokenizer.stop_tokens = [free[3]]
    cut = free.index(free[3])
    result = exact_match(model, tokenizer, [(conversation(QUESTIONS[0]), "x")], max_new_tokens=8)
    assert result.predictions == [tokenizer.decode(free[:cut])]


def test_whitespace_is_normalized_by_default(model: TransformerDecoder, tokenizer) -> None:
    prompt = prompt_tokens(tokenizer, conversation(QUESTIONS[1]))
    answer = tokenizer.decode(generate(model, prompt, max_new_tokens=5))
    sample = [(conversation(QUESTIONS[1]), f"  {answer}\n")]
    assert normalize_whitespace(f"  {answer}\n") == normalize_whitespace(answer)
    assert exact_match(model, tokenizer, sample, max_new_tokens=5).accuracy == 1.0
    if answer != f"  {answer}\n":
        assert exact_match(model, tokenizer, sample, max_new_tokens=5, normalize=None).accuracy == 0.0


def test_no_samples_gives_zero_accuracy(model: TransformerDecoder, tokenizer) -> None:
    result = exact_match(model, tokenizer, [])
    assert (result.num_total, result.accuracy) == (0, 0.0)


def test_tokenizer_without_generation_prompt_raises(model: TransformerDecoder) -> None:
    class Plain:
        def tokenize_messages(self, messages, *, add_eos=True):
            return [1], [True]

    with pytest.raises(ValueError, match=r"Plain.tokenize_messages has no add_generation_prompt argument"):
        prompt_tokens(Plain(), [Message("user", "hi")])
