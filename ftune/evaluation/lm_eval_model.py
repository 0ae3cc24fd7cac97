"""An lm-evaluation-harness model backed by an ftune decoder, its tokenizer and its KV cache.

`FtuneLM` answers the harness's three request types the way its Hugging Face model class does,
so a task scores the same through either on the same checkpoint:

- `loglikelihood`: lm_eval's `TemplateLM` splits and encodes (context, continuation); each pair
  is scored in one forward over (context + continuation)[:-1], left-truncated to `max_length`,
  and only the continuation's positions are projected to the vocabulary.
- `loglikelihood_rolling`: ftune's `rolling_token_logprobs` (the harness's disjoint windows of
  `max_length` tokens after a BOS/EOS prefix, chosen as the harness does), summed per document.
- `generate_until`: `ftune.generation.generate_batch` (KV cache, greedy unless the task asks
  to sample) until a stop token, a stop string, or `max_gen_toks`; the text is cut at the
  first stop string.

This module imports lm_eval: import it only where lm_eval is installed (the eval recipe checks
with `ftune.evaluation.harness.require_lm_eval` first). Adapters are merged into the model
before it gets here (`ftune.checkpointing.load_inference_model`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from torch import nn

from ftune.evaluation.perplexity import rolling_token_logprobs
from ftune.generation import generate_batch

if TYPE_CHECKING:
    from lm_eval.api.instance import Instance

    from ftune.tokenizers.base import Tokenizer

# The harness's default for a generation task that sets no max_gen_toks (its HF model's value).
DEFAULT_MAX_GEN_TOKS = 256
# generation_kwargs keys a task may set that this model understands (after lm_eval normalises them).
GENERATION_KEYS = {"until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p"}


class FtuneLM(TemplateLM):
    """An `lm_eval.api.model.LM` over an ftune decoder and tokenizer.

    Args:
        model: an ftune decoder in eval mode (`hidden`/`project`, `setup_caches`), adapters merged.
        tokenizer: an ftune tokenizer; `encode(add_bos=True)` is the harness's default encoding
            (BOS only when the model's tokenizer adds one), its BOS token (else EOS) prefixes
            rolling windows and empty contexts, its `stop_tokens` end generations.
        batch_size: requests (or rolling windows) per forward pass.
        max_length: the longest input in tokens; longer inputs lose their start. None: the
            model's `max_seq_len`.
        seed: seeds sampling when a task asks for it (greedy decoding ignores it).

    Raises:
        ValueError: batch_size or max_length < 1, or no max_length and the model has no max_seq_len.
    """

    backend = "causal"

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        *,
        batch_size: int = 8,
        max_length: int | None = None,
        seed: int = 1234,
    ) -> None:
        super().__init__()
        if max_length is None:
            max_length = getattr(model, "max_seq_len", None)
            if not isinstance(max_length, int):
                raise ValueError(
                    f"FtuneLM: {type(model).__name__} has no max_seq_len; pass max_length=<tokens>."
                )
        if batch_size < 1 or max_length < 1:
            raise ValueError(
                f"FtuneLM: batch_size and max_length must be >= 1; got {batch_size}, {max_length}."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.seed = seed
        self._device = next(model.parameters()).device

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def prefix_token_id(self) -> int:
        # Conditions an empty context and the first rolling window. lm-eval's HF model takes the
        # tokenizer's BOS token whenever the tokenizer names one, even one encoding never prepends
        # (SmolLM2's <|im_start|>), else EOS; ftune's HFTokenizer keeps such a token only among
        # its chat-template tokens, so look there too.
        if self.tokenizer.bos_id is not None:
            return self.tokenizer.bos_id
        declared = getattr(self.tokenizer, "template_tokens", {}).get("bos_token")
        token_id = None if declared is None else self.tokenizer.token_to_id(declared)
        return token_id if token_id is not None else self.tokenizer.eos_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Token ids of `string`; BOS as the tokenizer adds it by default, unless the text already starts with it."""
        add_bos = add_special_tokens
        if add_bos is None:
            bos = self.tokenizer.bos_id
            add_bos = bos is None or not string.startswith(self.tok_decode([bos], skip_special_tokens=False))
        return self.tokenizer.encode(string, add_bos=add_bos, add_eos=False)

    def tok_decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=skip_special_tokens)

    @torch.no_grad()
    def _loglikelihood_tokens(
        self,
        requests: list[tuple[tuple[str, str], list[int], list[int]]],
        disable_tqdm: bool = False,
        **_: Any,
    ) -> list[tuple[float, bool]]:
        """(sum of the continuation's log-probs, whether greedy decoding gives the continuation) per request."""
        rows: list[tuple[list[int], list[int]]] = []
        for (_, continuation), context_enc, continuation_enc in requests:
            if not continuation_enc or len(continuation_enc) > self.max_length:
                raise ValueError(
                    f"loglikelihood: the continuation {continuation!r} has {len(continuation_enc)} tokens; "
                    f"it needs 1 to max_length ({self.max_length}). Raise lm_eval_max_length or fix the task."
                )
            # The last token is only a target; what does not fit loses its start.
            rows.append(((context_enc + continuation_enc)[-(self.max_length + 1) : -1], continuation_enc))
        # Longest first, so a batch pads little; the results go back in request order.
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(rows)
        for first in range(0, len(order), self.batch_size):
            batch = order[first : first + self.batch_size]
            width = len(rows[batch[0]][0])
            inputs = torch.full((len(batch), width), self.prefix_token_id, dtype=torch.long)
            for r, i in enumerate(batch):
                inputs[r, : len(rows[i][0])] = torch.tensor(rows[i][0])  # right-padded: causal, pads inert
            hidden = _hidden(self.model, inputs.to(self._device))  # (b, width, dim)
            for r, i in enumerate(batch):
                window, target = rows[i]
                span = hidden[
                    r, len(window) - len(target) : len(window)
                ]  # (n, dim): predicts the continuation
                logprobs = F.log_softmax(_project(self.model, span).float(), dim=-1)  # (n, vocab)
                wanted = torch.tensor(target, device=logprobs.device)
                score = logprobs.gather(-1, wanted[:, None]).sum()
                out[i] = (float(score), bool((logprobs.argmax(-1) == wanted).all()))
        return out

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Each document's log-likelihood over disjoint windows of max_length tokens."""
        out = []
        for (text,) in (request.args for request in requests):
            logprobs = rolling_token_logprobs(
                self.model,
                self.tok_encode(text, add_special_tokens=False),
                prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length,
                batch_size=self.batch_size,
            )
            out.append(float(logprobs.sum()))
        return out

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Greedy (or sampled, if the task says) continuations, cut at the first stop string."""
        out = [""] * len(requests)
        eos = self.tok_decode([self.eot_token_id], skip_special_tokens=False)
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(requests):  # one generate_batch call per distinct generation_kwargs
            groups.setdefault(repr(sorted(request.args[1].items())), []).append(i)
        for indices in groups.values():
            kwargs = dict(normalize_gen_kwargs(requests[indices[0]].args[1], DEFAULT_MAX_GEN_TOKS))
            if unknown := sorted(set(kwargs) - GENERATION_KEYS):
                raise ValueError(
                    f"generate_until: generation_kwargs {unknown} of task {requests[indices[0]].task_name!r} "
                    f"are not supported by ftune's lm-eval model; it understands {sorted(GENERATION_KEYS)}."
                )
            until = handle_stop_sequences(kwargs["until"], eos=eos)
            max_new = kwargs["max_gen_toks"]
            if max_new >= self.max_length:
                raise ValueError(
                    f"generate_until: max_gen_toks ({max_new}) must be below max_length ({self.max_length}); "
                    "raise lm_eval_max_length or lower the task's max_gen_toks."
                )
            sampling = dict(temperature=0.0)
            if kwargs["do_sample"]:
                sampling = dict(
                    temperature=kwargs["temperature"], top_k=kwargs.get("top_k"), top_p=kwargs.get("top_p")
                )
            for first in range(0, len(indices), self.batch_size):
                batch = indices[first : first + self.batch_size]
                # Contexts keep their end: room for max_gen_toks new tokens within max_length.
                prompts = [
                    self.tok_encode(requests[i].args[0])[-(self.max_length - max_new) :] for i in batch
                ]
                texts = self._generate(prompts, max_new, until, sampling)
                for i, text in zip(batch, texts):
                    out[i] = postprocess_generated_text(text, until, think_end_token=None)
        return out

    def _generate(
        self, prompts: list[list[int]], max_new: int, until: list[str], sampling: dict[str, Any]
    ) -> list[str]:
        stops = set(self.tokenizer.stop_tokens)
        strings = [s for s in until if s]

        def reached_stop_string(_: int, tokens: list[int]) -> bool:
            return any(s in self.tok_decode(tokens) for s in strings)

        answers = generate_batch(
            self.model,
            prompts,
            max_new_tokens=max_new,
            stop_tokens=sorted(stops),
            stop_when=reached_stop_string if strings else None,
            pad_id=self.tokenizer.pad_id,
            seed=self.seed,
            **sampling,
        )
        return [self.tok_decode([t for t in answer if t not in stops]) for answer in answers]


def _hidden(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    hidden = getattr(model, "hidden", None)
    return hidden(tokens) if callable(hidden) else model(tokens)


def _project(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    # Only the continuation's positions reach the vocabulary: the projection is a large share of a
    # small model's work, and the context's logits are never read.
    project = getattr(model, "project", None)
    return project(hidden) if callable(project) and callable(getattr(model, "hidden", None)) else hidden
