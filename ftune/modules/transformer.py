"""Decoder-only transformer: embeddings, a stack of decoder layers, final norm, output projection."""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.context_exchange import ContextSplit
from ftune.modules.cross_attention_layer import CrossAttendInputs, CrossAttentionLayer
from ftune.modules.softcap import softcap


class OutputHead(NamedTuple):
    """What turns final hidden states into logits: the one way every loss reads the output layer.

    Losses project in blocks of tokens themselves (only one block of fp32 logits at a time), so they
    take the head, never the bare weight: a soft-capped model's logits are capped in every loss.

    Attributes:
        weight: the (vocab_size, embed_dim) output projection (tied or not).
        softcap: logits are ``softcap * tanh(hidden @ weight.T / softcap)`` (Gemma 2's
            final_logit_softcapping); None = plain ``hidden @ weight.T``.
    """

    weight: torch.Tensor
    softcap: float | None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``(..., vocab)`` of hidden states ``(..., embed_dim)``: projected, upcast, then capped
        in fp32 (tanh's slope matters near the cap)."""
        logits = F.linear(hidden, self.weight).float()
        return logits if self.softcap is None else softcap(logits, self.softcap)


class TransformerDecoder(nn.Module):
    """Token ids in, next-token logits out.

    State-dict keys are `tok_embeddings.weight`, `layers.{i}.attn.{q,k,v,o}_proj.weight`,
    `layers.{i}.mlp.{gate,up,down}_proj.weight`, `layers.{i}.{attn,mlp}_norm.weight`,
    `norm.weight` and `output.weight` (absent when the output is tied to the embeddings).

    Args:
        tok_embeddings: vocab_size -> embed_dim lookup.
        layers: the decoder layers, applied in order.
        norm: final norm.
        output: embed_dim -> vocab_size projection, or None to reuse `tok_embeddings.weight`
            (tied embeddings, as in Llama 3.2, Qwen2.5 <= 3B and SmolLM2).
        max_seq_len: the longest context the model was trained for; informational (RoPE has no
            table), and the default length of KV caches.
        final_logit_softcap: cap the output logits at ±cap with tanh (Gemma 2's
            final_logit_softcapping); None = plain logits. Every loss reads `head` (weight and cap).
    """

    def __init__(
        self,
        *,
        tok_embeddings: nn.Embedding,
        layers: nn.ModuleList,
        norm: nn.Module,
        output: nn.Linear | None,
        max_seq_len: int,
        final_logit_softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.tok_embeddings = tok_embeddings
        self.layers = layers
        self.norm = norm
        self.output = output
        self.max_seq_len = max_seq_len
        self.final_logit_softcap = final_logit_softcap
        # Context parallel: the ranks holding the other slices of each sequence (`ContextSplit`); None = whole sequences.
        self.context_split: ContextSplit | None = None

    @property
    def head(self) -> OutputHead:
        """The output projection's weight and the logits' soft-cap: what every loss reads to compute the
        logits the model outputs, in blocks (``training.token_loss`` and the other loss helpers pass it)."""
        weight = self.tok_embeddings.weight if self.output is None else self.output.weight
        return OutputHead(weight, self.final_logit_softcap)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final hidden states (..., embed_dim) -> logits (..., vocab_size), soft-capped if the model caps."""
        logits = F.linear(hidden, self.tok_embeddings.weight) if self.output is None else self.output(hidden)
        return logits if self.final_logit_softcap is None else softcap(logits, self.final_logit_softcap)

    def hidden(
        self,
        tokens: torch.Tensor,
        *,
        input_pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        embeds: torch.Tensor | None = None,
        also_attend: torch.Tensor | None = None,
        cross_attend: CrossAttendInputs | None = None,
    ) -> torch.Tensor:
        """Run everything but the output projection.

        Args:
            tokens: (b, s) long token ids.
            input_pos: (b, s) long positions; None = 0..s-1 for every row. Positions may restart
                inside a row (packed documents). Required when caches are enabled.
            mask: bool (b, s, s_kv), True = may attend; None = causal. s_kv is s, or the cache
                length when caches are enabled.
            embeds: (b, s, embed_dim) input embeddings to use in place of `tok_embeddings(tokens)`
                (an image-text model writes image features into them); None = embed `tokens`.
            also_attend: bool (b, s, s), pairs (query i, key j) of this input that may attend on top
                of `mask` (or the causal default): the bidirectional term within an image. Local
                layers still apply their window to it. With caches, key j is the one written at
                `input_pos[:, j]`.
            cross_attend: the images and mask the `CrossAttentionLayer`s among `layers` read (Llama 3.2
                Vision); None = no images (those layers pass their input through, unless their caches
                hold a prompt's images).

        Returns:
            Final-norm hidden states (b, s, embed_dim).

        Raises:
            ValueError: on a bad shape or dtype of `tokens`, `input_pos`, `mask`, `embeds` or
                `also_attend`, or a missing `input_pos` while caches are enabled.
        """
        input_pos = self._check_inputs(tokens, input_pos, mask)
        if mask is None and self.caches_are_enabled():
            # Attend to every cached position up to one's own; built once here rather than per layer.
            cache_len = self.layers[0].attn.kv_cache.max_seq_len
            mask = torch.arange(cache_len, device=tokens.device)[None, None, :] <= input_pos[:, :, None]
            mask = mask.expand(tokens.shape[0], -1, -1)  # (b, s, cache_len)
        if also_attend is not None:
            mask = self._add_pairs(mask, also_attend, input_pos, tokens.shape)
        split = self.context_split
        if split is not None:  # this rank runs its slice of every sequence; the end gathers them back
            split.check(
                images=embeds is not None or cross_attend is not None, caches=self.caches_are_enabled()
            )
            length = tokens.shape[1]
            tokens, input_pos, mask = split.slice(tokens, input_pos, mask)  # (b, chunk), mask (b, chunk, s)
        if embeds is None:
            h = self.tok_embeddings(tokens)  # (b, s, d)
        else:
            h = self._checked_embeds(tokens, embeds)  # (b, s, d)
        for layer in self.layers:
            if isinstance(layer, CrossAttentionLayer):
                h = layer(h, cross_attend)
            else:
                h = layer(h, input_pos=input_pos, mask=mask)
        return self.norm(h) if split is None else split.gather(self.norm(h), length)  # (b, s, d)

    def _checked_embeds(self, tokens: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        d = self.tok_embeddings.weight.shape[1]
        if tuple(embeds.shape) != (*tokens.shape, d):
            raise ValueError(
                f"TransformerDecoder: embeds must have shape ({', '.join(map(str, tokens.shape))}, {d}) "
                f"(tokens' shape and the embedding width), got {tuple(embeds.shape)}."
            )
        return embeds

    def _add_pairs(
        self,
        mask: torch.Tensor | None,
        also_attend: torch.Tensor,
        input_pos: torch.Tensor,
        shape: tuple[int, int],
    ) -> torch.Tensor:
        """`mask` (None = causal; with caches already the cache mask) or-ed with `also_attend`'s pairs."""
        b, s = shape
        if also_attend.dtype != torch.bool or tuple(also_attend.shape) != (b, s, s):
            raise ValueError(
                f"TransformerDecoder: also_attend must be a bool tensor of shape ({b}, {s}, {s}), got "
                f"{also_attend.dtype} {tuple(also_attend.shape)}; build it with "
                "ftune.modules.masks.image_block_mask(is_image)."
            )
        if not self.caches_are_enabled():
            base = (
                torch.ones(s, s, dtype=torch.bool, device=also_attend.device).tril() if mask is None else mask
            )
            return base | also_attend  # (b, s, s)
        columns = input_pos.expand(b, -1)[:, None, :].expand(-1, s, -1)  # (b, s, s): cache slot of key j
        extra = torch.zeros_like(mask).scatter(2, columns, also_attend)  # (b, s, cache_len)
        return mask | extra

    def _check_inputs(
        self, tokens: torch.Tensor, input_pos: torch.Tensor | None, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Validate the arguments of `hidden`; return `input_pos`, defaulted to 0..s-1 (1, s)."""
        if tokens.dim() != 2:
            raise ValueError(
                f"TransformerDecoder: tokens must be (batch, seq_len), got shape {tuple(tokens.shape)}."
            )
        b, s = tokens.shape
        caching = self.caches_are_enabled()
        if input_pos is None:
            if caching:
                raise ValueError(
                    "TransformerDecoder: caches are enabled, so input_pos (batch, seq_len) is required to know "
                    "where to write keys/values; pass input_pos, or call model.delete_caches()."
                )
            input_pos = torch.arange(s, device=tokens.device)[None, :]  # (1, s)
        elif input_pos.dim() != 2 or input_pos.shape[1] != s or input_pos.shape[0] not in (1, b):
            raise ValueError(
                f"TransformerDecoder: input_pos must have shape ({b}, {s}) like tokens, got {tuple(input_pos.shape)}."
            )
        s_kv = self.layers[0].attn.kv_cache.max_seq_len if caching else s
        if caching:
            # One host sync per decoding step (not one per layer): an out-of-range write would be silent.
            last = int(input_pos.max())
            if last >= s_kv:
                raise ValueError(
                    f"TransformerDecoder: position {last} is past the cache length {s_kv}; call "
                    "model.setup_caches(batch_size, max_seq_len=...) with a larger max_seq_len."
                )
        if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != (b, s, s_kv)):
            raise ValueError(
                f"TransformerDecoder: mask must be a bool tensor of shape ({b}, {s}, {s_kv}) with True = may "
                f"attend, got {mask.dtype} {tuple(mask.shape)}; build one with "
                "ftune.modules.masks.document_causal_mask(document_ids)."
            )
        return input_pos

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        input_pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (b, s, vocab_size); arguments as in `hidden`."""
        return self.project(self.hidden(tokens, input_pos=input_pos, mask=mask))

    def setup_caches(
        self, batch_size: int, max_seq_len: int | None = None, dtype: torch.dtype | None = None
    ) -> None:
        """Allocate a KV cache in every layer, on the model's device.

        Args:
            batch_size: sequences decoded together.
            max_seq_len: cache length; defaults to the model's `max_seq_len`.
            dtype: cache dtype; defaults to the embedding weight's dtype.
        """
        weight = self.tok_embeddings.weight
        for layer in self.layers:
            layer.attn.setup_cache(
                batch_size, max_seq_len or self.max_seq_len, dtype or weight.dtype, weight.device
            )

    def repeat_caches(self, batch_size: int) -> None:
        """Repeat the rows of every layer's cache to `batch_size` rows (see `KVCache.repeat_rows`)."""
        for layer in self.layers:
            layer.attn.kv_cache.repeat_rows(batch_size)

    def keep_cache_rows(self, rows: torch.Tensor) -> None:
        """Keep only the cache rows `rows` of every layer (see `KVCache.keep_rows`)."""
        for layer in self.layers:
            layer.attn.kv_cache.keep_rows(rows)

    def reset_caches(self) -> None:
        """Zero every KV cache (keeps them allocated)."""
        for layer in self.layers:
            if layer.attn.kv_cache is not None:
                layer.attn.kv_cache.reset()

    def delete_caches(self) -> None:
        """Free every KV cache; the model goes back to training-style full-sequence attention."""
        for layer in self.layers:
            layer.attn.kv_cache = None

    def caches_are_enabled(self) -> bool:
        """True once `setup_caches` has run (and `delete_caches` has not)."""
        return self.layers[0].attn.kv_cache is not None if len(self.layers) else False
