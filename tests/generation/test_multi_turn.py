"""multi_turn_rollout(): conversations grown on the KV cache equal the same conversations recomputed without it."""

import pytest
import torch
from agent_world import END, PAD, RECORDS, CalculatorEnvironment, CharTokenizer, parse

import ftune.generation.multi_turn as multi_turn
from ftune.generation.chat_tokens import ChatTokens, ConversationError
from ftune.generation.multi_turn import Trajectories, Trajectory, TurnLimits, multi_turn_rollout
from ftune.models.llama3 import llama3

LIMITS = TurnLimits(max_turns=3, max_turn_tokens=12, max_trajectory_tokens=120)


def talkative(seed: int = 1) -> torch.nn.Module:
    """A tiny random model that ends its turns (<end>) often enough for conversations of several turns."""
    torch.manual_seed(seed)  # the generation tests' tiny llama3 (conftest.build_tiny), a longer context
    model = llama3(
        vocab_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=64,
        max_seq_len=256,
    ).eval()
    with torch.no_grad():
        model.output.weight[END] *= 6.0
    return model


def run(model, records=RECORDS, group_size=2, limits=LIMITS, temperature=0.0, seeds=None) -> Trajectories:
    gens = None if seeds is None else [torch.Generator().manual_seed(s) for s in seeds]
    return multi_turn_rollout(
        model,
        records,
        environment=CalculatorEnvironment(),
        chat=ChatTokens(CharTokenizer()),
        parse=parse,
        group_size=group_size,
        limits=limits,
        temperature=temperature,
        top_k=None,
        top_p=None,
        stop_ids=[END],
        pad_id=PAD,
        generator=gens,
    )


def uncached(model, record, limits=LIMITS) -> tuple[list[int], list[bool], list[float]]:
    """The reference: one conversation, the whole history recomputed without a cache for every token."""
    chat, env = ChatTokens(CharTokenizer()), CalculatorEnvironment()
    messages, episode = env.start(record)
    prompt = chat.prompt(messages)
    tokens, sampled, logps = [], [], []
    for turn_index in range(limits.max_turns):
        turn = []
        while True:
            with torch.no_grad():
                logits = model(torch.tensor([prompt + tokens]))[0, -1].float()
            token = int(logits.argmax())
            (
                tokens.append(token),
                sampled.append(True),
                logps.append(float(torch.log_softmax(logits, -1)[token])),
            )
            turn.append(token)
            if (
                token == END
                or len(turn) == limits.max_turn_tokens
                or len(tokens) == limits.max_trajectory_tokens
            ):
                break
        if token != END:
            break
        text = chat.text(turn[:-1], special=True)
        messages = messages + [{"role": "assistant", "content": text}]
        step = episode.step(parse(text))
        if step.done or turn_index == limits.max_turns - 1:
            break
        suffix = chat.prompt(messages + step.messages)[len(prompt) + len(tokens) :]
        if len(tokens) + len(suffix) >= limits.max_trajectory_tokens:
            break
        messages += step.messages
        tokens += suffix
        sampled += [False] * len(suffix)
        logps += [0.0] * len(suffix)
    return tokens, sampled, logps


def test_the_kv_cache_path_equals_recomputing_the_whole_history():
    model = talkative()
    out = run(model)
    assert [r.turns for r in out.rows] == [3, 3, 1, 1, 3, 3]  # rows end at different turns
    assert [r.stop for r in out.rows] == ["done", "done", "done", "done", "max_turns", "max_turns"]
    for i, row in enumerate(out.rows):
        tokens, sampled, logps = uncached(model, RECORDS[i // 2])
        assert row.tokens == tokens and row.sampled == sampled, f"row {i}"
        torch.testing.assert_close(torch.tensor(row.logps), torch.tensor(logps), rtol=0, atol=1e-5)


def test_a_sampled_trajectory_does_not_depend_on_the_rows_beside_it():
    """Rows finish at different turns and budgets; each draws from its own generator only, so running a
    record alone gives its rows the same trajectories as the batch of all records."""
    model = talkative()
    seeds = [11, 12, 13, 14, 15, 16]
    together = run(model, temperature=1.0, seeds=seeds)
    assert len({(r.turns, r.stop) for r in together.rows}) >= 3  # several turn counts and stop reasons
    for i, row in enumerate(together.rows):
        alone = run(model, records=[RECORDS[i // 2]], group_size=1, temperature=1.0, seeds=[seeds[i]]).rows[0]
        assert (alone.tokens, alone.sampled, alone.stop) == (row.tokens, row.sampled, row.stop), f"row {i}"
        torch.testing.assert_close(torch.tensor(alone.logps), torch.tensor(row.logps), rtol=0, atol=1e-5)


def test_the_history_is_prefilled_once(monkeypatch):
    """Every token of a conversation is fed to the cache once (a record's prompt once for its G rows; the
    last sampled token never: nothing reads it), and ended conversations leave the batch."""
    fed, batch_rows = {}, []
    real_feed, real_hidden = multi_turn._Cache.feed, None

    def feed(self, pieces):
        for i, ids in pieces.items():
            fed.setdefault(i, []).extend(ids)
        return real_feed(self, pieces)

    monkeypatch.setattr(multi_turn._Cache, "feed", feed)
    model = talkative()
    real_hidden = model.hidden
    model.hidden = lambda tokens, **kw: (batch_rows.append(tokens.shape[0]), real_hidden(tokens, **kw))[1]
    out = run(model)
    for i, row in enumerate(out.rows):
        history = fed.get(i, []) if i % 2 == 0 else fed[i - 1][: len(row.prompt)] + fed.get(i, [])
        assert history == (row.prompt + row.tokens)[:-1], f"row {i}"
    assert batch_rows[0] == 3 and max(batch_rows) == 6 and batch_rows[-1] < 6  # grouped prefill; rows leave


def test_the_trajectory_budget_counts_environment_tokens():
    limits = TurnLimits(max_turns=3, max_turn_tokens=12, max_trajectory_tokens=60)
    out = run(talkative(), limits=limits)
    assert max(len(r.tokens) for r in out.rows) <= 60
    assert "max_trajectory_tokens" in {r.stop for r in out.rows}
    with pytest.raises(
        ValueError, match=r"plus max_trajectory_tokens \(250\) is more than the model's max_seq_len"
    ):
        run(talkative(), limits=TurnLimits(max_turns=3, max_turn_tokens=12, max_trajectory_tokens=250))


def test_training_batch_trains_the_model_tokens_only():
    """A hand-built conversation, checked token by token: prompt and environment -100, model tokens labelled."""
    chat = ChatTokens(CharTokenizer())
    messages = [{"role": "user", "content": "1+1?"}]
    prompt = chat.prompt(messages)
    turn1 = chat.encode("calc(1+1)") + [END]
    messages += [{"role": "assistant", "content": "calc(1+1)"}, {"role": "tool", "content": "2"}]
    answer = chat.extension(prompt + turn1, messages, row=0)
    assert chat.text(answer, special=True) == "\n<start>tool\n2<end>\n<start>assistant\n"
    turn2 = chat.encode("2") + [END]
    row = Trajectory(prompt, turn1 + answer + turn2, [True] * 10 + [False] * len(answer) + [True] * 2)
    row.logps = [-0.5 if s else 0.0 for s in row.sampled]
    short = Trajectory(prompt, turn2, [True, True], [-0.25, -0.25])
    batch = Trajectories([row, short], group_size=2, pad_id=PAD, logp_temperature=1.0).training_batch()
    ids = prompt + turn1 + answer + turn2
    assert batch["tokens"][0].tolist() == ids
    assert batch["tokens"][1].tolist() == prompt + turn2 + [PAD] * (len(ids) - len(prompt) - 2)
    expected = [-100] * len(prompt) + turn1 + [-100] * len(answer) + turn2
    assert batch["labels"][0].tolist() == expected
    assert batch["labels"][1].tolist() == [-100] * len(prompt) + turn2 + [-100] * (len(ids) - len(prompt) - 2)
    trained = [chat.text([t], special=True) for t, lab in zip(ids, expected) if lab != -100]
    assert "".join(trained) == "calc(1+1)<end>2<end>"
    assert batch["old_logps"][0].tolist() == [0.0] * len(prompt) + row.logps


def test_extension_takes_the_text_when_a_sampled_turn_is_not_the_tokenizers_split():
    chat = ChatTokens(CharTokenizer(merges=("ab",)))
    messages = [{"role": "user", "content": "x"}]
    prompt = chat.prompt(messages)
    a, b = chat.encode("a"), chat.encode("b")
    sampled = a + b + [END]  # the tokenizer writes "ab" as one token
    grown = messages + [{"role": "assistant", "content": "ab"}, {"role": "tool", "content": "ok"}]
    assert chat.encode(chat.render(grown))[: len(prompt) + 3] != prompt + sampled
    assert chat.text(chat.extension(prompt + sampled, grown, row=0), special=True) == (
        "\n<start>tool\nok<end>\n<start>assistant\n"
    )


def test_a_template_that_rewrites_earlier_turns_is_refused():
    class Forgetful(CharTokenizer):
        def render(self, messages, *, add_generation_prompt=False):  # drops earlier assistant turns
            kept = [m for m in messages[:-1] if m.role != "assistant"] + list(messages[-1:])
            return super().render(kept, add_generation_prompt=add_generation_prompt)

    chat = ChatTokens(Forgetful())
    messages = [{"role": "user", "content": "x"}]
    cached = chat.prompt(messages) + chat.encode("hi") + [END]
    grown = messages + [{"role": "assistant", "content": "hi"}, {"role": "tool", "content": "ok"}]
    with pytest.raises(
        ConversationError,
        match=r"row 3: the chat template renders the grown conversation .* "
        r"texts part at character 26: cached 'assistant.*hi<end>', rendered 'tool.*set tokenizer.chat_template",
    ):
        chat.extension(cached, grown, row=3)
