"""An image-text model: a vision encoder and a projector feeding a text decoder's embeddings.

Gemma 3, SmolVLM (Idefics3) and LLaVA-style models all work this way: the text holds a run of
placeholder tokens (the image token) for each image, as many as the projector gives tokens per
image; the images' projected features replace those tokens' embeddings, in order (the first
image's rows fill the first placeholders of the first sample, and so on); the text decoder runs
on the result. They differ in the encoder's output they take, the projector, and whether image
tokens see each other both ways (Gemma 3) or causally like text (Idefics3, LLaVA).
"""

import torch
from torch import nn

from ftune.modules.masks import image_block_mask
from ftune.modules.transformer import OutputHead, TransformerDecoder
from ftune.modules.vision.siglip import SiglipVisionEncoder


class ImageTextModel(nn.Module):
    """Token ids with image placeholders, and the images' pixels, in; next-token logits out.

    State-dict keys are `vision_encoder.*` (`SiglipVisionEncoder`), `projector.*` and `decoder.*`
    (the text decoder's own keys). Caches, the output head and `max_seq_len` are the decoder's.

    Args:
        vision_encoder: pixels -> patch features.
        projector: patch features -> (n_images, tokens_per_image, text embed_dim); has an int
            attribute `tokens_per_image`.
        decoder: the text decoder.
        image_token_id: the placeholder token id [image_token_id / image_token_index].
        bidirectional_images: tokens of one image attend to each other both ways, on top of the
            causal (and, in local layers, windowed) mask (Gemma 3); False = causal (Idefics3, LLaVA).
        feature_layer: the encoder output the projector takes (`SiglipVisionEncoder.forward`); None =
            the last layer's, through the encoder's final norm.
    """

    def __init__(
        self,
        *,
        vision_encoder: SiglipVisionEncoder,
        projector: nn.Module,
        decoder: TransformerDecoder,
        image_token_id: int,
        bidirectional_images: bool = False,
        feature_layer: int | None = None,
    ) -> None:
        super().__init__()
        self.vision_encoder = vision_encoder
        self.projector = projector
        self.decoder = decoder
        self.image_token_id = image_token_id
        self.bidirectional_images = bidirectional_images
        self.feature_layer = feature_layer
        # Set by FSDP2 sharding over several ranks (`ftune.training.shard_model`): a training forward
        # without images still runs the encoder and projector (on a blank image, adding zero), so that
        # every rank runs the same sharded units whatever images its batch holds.
        self.encode_without_images = False

    @property
    def tokens_per_image(self) -> int:
        """Placeholder tokens each image takes in the text."""
        return self.projector.tokens_per_image

    @property
    def max_seq_len(self) -> int:
        """The text decoder's trained context length."""
        return self.decoder.max_seq_len

    @property
    def head(self) -> OutputHead:
        """The text decoder's output head (what every loss reads)."""
        return self.decoder.head

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final hidden states -> logits, as the text decoder projects them."""
        return self.decoder.project(hidden)

    def image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(n_images, channels, size, size) pixels -> (n_images, tokens_per_image, text embed_dim)."""
        return self.projector(self.vision_encoder(pixel_values, feature_layer=self.feature_layer))

    def blank_image_term(self, like: torch.Tensor) -> torch.Tensor:
        """Zero, computed from one blank image through the encoder and projector: added to a text-only
        batch's embeddings when `encode_without_images` (the parameters then get zero gradients)."""
        encoder = self.vision_encoder
        side, channels = encoder.image_size, encoder.patch_embedding.in_channels
        return 0.0 * self.image_features(like.new_zeros(1, channels, side, side)).sum()

    def hidden(
        self,
        tokens: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        *,
        input_pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final-norm hidden states (b, s, embed_dim).

        Args:
            tokens: (b, s) token ids, with `tokens_per_image` image tokens in a row for each image.
            pixel_values: (n_images, channels, size, size), the images of every sample in order;
                None = text only (a decoding step after the prefill, or a batch without images).
            input_pos, mask: as in `TransformerDecoder.hidden`; with `bidirectional_images` the
                pairs of tokens of one image are added to `mask` (or to the causal default).

        Raises:
            ValueError: when the image tokens in `tokens` are not `tokens_per_image` for each image
                of `pixel_values`, or for the decoder's own checks.
        """
        if pixel_values is None:
            if not self.encode_without_images or self.decoder.caches_are_enabled():
                return self.decoder.hidden(tokens, input_pos=input_pos, mask=mask)
            embeds = self.decoder.tok_embeddings(tokens)  # (b, s, d)
            embeds = embeds + self.blank_image_term(embeds)  # the same values; every unit ran
            return self.decoder.hidden(tokens, input_pos=input_pos, mask=mask, embeds=embeds)
        is_image = tokens == self.image_token_id  # (b, s)
        features = self.image_features(pixel_values)  # (n, t, d)
        found, expected = int(is_image.sum()), features.shape[0] * features.shape[1]
        if found != expected:
            raise ValueError(
                f"ImageTextModel: the tokens hold {found} image tokens (id {self.image_token_id}), but "
                f"{features.shape[0]} images of {features.shape[1]} tokens each need {expected}; lay the "
                "text out with the family's image transform, which writes the image tokens."
            )
        # The placeholder's own embedding is never used (its id may be past the vocabulary: id 0 there).
        embeds = self.decoder.tok_embeddings(tokens.masked_fill(is_image, 0))  # (b, s, d)
        embeds = embeds.masked_scatter(is_image[..., None], features.to(embeds.dtype))  # (b, s, d)
        also_attend = image_block_mask(is_image) if self.bidirectional_images else None
        return self.decoder.hidden(
            tokens, input_pos=input_pos, mask=mask, embeds=embeds, also_attend=also_attend
        )

    def forward(
        self,
        tokens: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        *,
        input_pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (b, s, vocab_size); arguments as in `hidden`."""
        return self.project(self.hidden(tokens, pixel_values, input_pos=input_pos, mask=mask))

    def setup_caches(
        self, batch_size: int, max_seq_len: int | None = None, dtype: torch.dtype | None = None
    ) -> None:
        """Allocate the text decoder's KV caches (`TransformerDecoder.setup_caches`)."""
        self.decoder.setup_caches(batch_size, max_seq_len, dtype)

    def repeat_caches(self, batch_size: int) -> None:
        """`TransformerDecoder.repeat_caches`."""
        self.decoder.repeat_caches(batch_size)

    def reset_caches(self) -> None:
        """`TransformerDecoder.reset_caches`."""
        self.decoder.reset_caches()

    def delete_caches(self) -> None:
        """`TransformerDecoder.delete_caches`."""
        self.decoder.delete_caches()

    def caches_are_enabled(self) -> bool:
        """`TransformerDecoder.caches_are_enabled`."""
        return self.decoder.caches_are_enabled()
