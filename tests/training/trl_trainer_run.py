"""Run one of TRL's own trainers offline on a tiny `transformers` model and record what it trained on.

A helper of tests/training/test_kto_orpo_trl_trainer.py: ``record(trainer_cls, ...)`` subclasses the
trainer so that each ``compute_loss`` call keeps a copy of its collated batch, trains for the
config's steps, and returns the batches with the trainer's per-step logs (its loss and metrics, as
``Trainer.log`` writes them with ``logging_steps=1``). The text rows are token ids written out
("5 17 33"): a word-level tokenizer maps each back to its id, so TRL's own tokenization and
collation run unchanged and the batches hold the ids the test chose.
"""

from __future__ import annotations

import torch

PAD, EOS = 0, 2


def tokenizer(vocab_size: int):
    """A word-level tokenizer of ``"3" ... str(vocab_size - 1)``: the text ``"5 17"`` is the ids [5, 17].

    Its pad, unknown and EOS tokens (ids 0, 1, 2) are not digits: a special token's text is matched
    inside words, so an EOS written "2" would split "127" into three tokens.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<unk>": 1, "</s>": EOS, **{str(i): i for i in range(3, vocab_size)}}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="<pad>", eos_token="</s>")


def text(ids: list[int]) -> str:
    return " ".join(map(str, ids))


def record(trainer_cls, **kwargs) -> tuple[list[dict], list[dict]]:
    """``trainer_cls(**kwargs).train()``: the batches its ``compute_loss`` saw and its logs with a loss."""
    from transformers import TrainerCallback

    batches: list[dict] = []
    history: list[dict] = []

    class Recording(trainer_cls):
        def compute_loss(self, model, inputs, *args, **kw):
            batches.append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
            return super().compute_loss(model, inputs, *args, **kw)

    class Logs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                history.append(dict(logs))

    Recording(**kwargs, callbacks=[Logs()]).train()
    return batches, history
