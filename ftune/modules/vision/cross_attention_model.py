"""An image-text model whose decoder reads the images through cross-attention (Llama 3.2 Vision).

Unlike `ImageTextModel` (image features replace placeholder tokens' embeddings), each image stays one
`<|image|>` token in the text, embedded as any token; the tiled encoder's features, projected to the
text width, are the keys and values of the decoder's `CrossAttentionLayer`s. Which image tiles a text
token reads is `cross_attention_mask` (b, s, images, tiles), as transformers' MllamaProcessor and
`ftune.data.padded_collate_vision` build it: a token reads the images from the last run of image
tokens at or before it.

A batch whose samples hold different numbers of images is regrouped per sample as transformers pads
it: a missing image is all-zero pixels with aspect ratio id 0 and only its first tile marked, and it
is encoded like the others (a text token that reads no tile attends to every image token of its
sample, as in transformers, so even padding images reach the logits; their feed-forward term is zero).
"""

import torch

from ftune.modules.cross_attention_layer import CrossAttendInputs
from ftune.modules.transformer import TransformerDecoder
from ftune.modules.vision.image_text_model import ImageTextModel
from ftune.modules.vision.projectors import LinearProjector
from ftune.modules.vision.tiled_encoder import TiledVisionEncoder


class CrossAttentionImageTextModel(ImageTextModel):
    """Token ids and images in, next-token logits out; keys `vision_encoder.*` (`TiledVisionEncoder`),
    `projector.*` (`LinearProjector`) and `decoder.*` (the text decoder's own keys).

    It is an `ImageTextModel` for everything that handles the three parts (FSDP2 and activation
    checkpointing wrap `vision_encoder.layers` and `decoder.layers`; `train_parts`; LoRA targets), and
    replaces the forward.

    Args:
        vision_encoder: the tiled encoder.
        projector: output_dim -> text embed_dim.
        decoder: the text decoder with `CrossAttentionLayer`s among its layers.
        image_token_id: the `<|image|>` id [image_token_index].
    """

    def __init__(
        self,
        *,
        vision_encoder: TiledVisionEncoder,
        projector: LinearProjector,
        decoder: TransformerDecoder,
        image_token_id: int,
    ) -> None:
        super().__init__(
            vision_encoder=vision_encoder, projector=projector, decoder=decoder, image_token_id=image_token_id
        )
        self._last_row: torch.Tensor | None = (
            None  # (b, images, tiles): the prompt's last cross-attention row
        )

    @property
    def tokens_per_image(self) -> int:
        """An image is one `<|image|>` token in the text."""
        return 1

    def image_features(
        self,
        pixel_values: torch.Tensor,
        aspect_ratio_ids: torch.Tensor,
        aspect_ratio_mask: torch.Tensor,
    ) -> torch.Tensor:
        """(n, tiles, channels, size, size) -> (n, tiles * num_patches, text embed_dim)."""
        features = self.projector(self.vision_encoder(pixel_values, aspect_ratio_ids, aspect_ratio_mask))
        return features.flatten(1, 2)

    def blank_image_term(self, like: torch.Tensor) -> torch.Tensor:
        """`ImageTextModel.blank_image_term`: one blank image of one tile (aspect ratio id 1)."""
        encoder = self.vision_encoder
        side, tiles = encoder.image_size, encoder.max_num_tiles
        pixels = like.new_zeros(1, tiles, encoder.patch_embedding.in_channels, side, side)
        ids = torch.ones(1, dtype=torch.long, device=like.device)
        tile_mask = torch.zeros(1, tiles, dtype=torch.long, device=like.device)
        tile_mask[:, 0] = 1
        return 0.0 * self.image_features(pixels, ids, tile_mask).sum()

    def _grouped(
        self,
        batch_size: int,
        images_per_sample: int,
        pixel_values: torch.Tensor,
        aspect_ratio_ids: torch.Tensor,
        aspect_ratio_mask: torch.Tensor,
        image_sample: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Flat images -> (b * images_per_sample, ...) slots, each sample's in order, padding slots as
        transformers' processor pads them."""
        n = pixel_values.shape[0]
        if image_sample is None:
            if batch_size != 1:
                raise ValueError(
                    f"CrossAttentionImageTextModel: {n} images for a batch of {batch_size} rows need image_sample "
                    "(n,), the row of each image (ftune.data.padded_collate_vision gives it)."
                )
            image_sample = torch.zeros(n, dtype=torch.long, device=pixel_values.device)
        counts = torch.bincount(image_sample, minlength=batch_size)
        if int(counts.max()) > images_per_sample:
            raise ValueError(
                f"CrossAttentionImageTextModel: a sample holds {int(counts.max())} images but cross_attention_mask "
                f"has room for {images_per_sample}; build both with ftune.data.padded_collate_vision."
            )
        starts = torch.cumsum(counts, 0) - counts
        slot = image_sample * images_per_sample + torch.arange(n, device=counts.device) - starts[image_sample]
        slots = batch_size * images_per_sample
        pixels = pixel_values.new_zeros(slots, *pixel_values.shape[1:]).index_copy(0, slot, pixel_values)
        ids = aspect_ratio_ids.new_zeros(slots).index_copy(0, slot, aspect_ratio_ids.view(-1))
        tile_mask = aspect_ratio_mask.new_zeros(slots, aspect_ratio_mask.shape[-1])
        tile_mask[:, 0] = 1  # a padding image has its first tile marked, as transformers' processor pads it
        tile_mask = tile_mask.index_copy(0, slot, aspect_ratio_mask.view(n, -1))
        return pixels, ids, tile_mask

    def _cross_inputs(
        self, images: torch.Tensor | None, cross_attention_mask: torch.Tensor
    ) -> CrossAttendInputs:
        """(b, s, images, tiles) 0/1 -> the layers' bool masks over image tokens."""
        per_tile = self.vision_encoder.num_patches
        b, s = cross_attention_mask.shape[:2]
        allowed = cross_attention_mask.bool().repeat_interleave(per_tile, dim=-1).view(b, s, -1)  # (b, s, n)
        rows = allowed.any(dim=-1)  # (b, s)
        return CrossAttendInputs(images, allowed | ~rows[..., None], rows)

    def hidden(
        self,
        tokens: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        *,
        aspect_ratio_ids: torch.Tensor | None = None,
        aspect_ratio_mask: torch.Tensor | None = None,
        image_sample: torch.Tensor | None = None,
        cross_attention_mask: torch.Tensor | None = None,
        input_pos: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final-norm hidden states (b, s, embed_dim).

        Args:
            tokens: (b, s) token ids, one `<|image|>` token for each image.
            pixel_values: (n, max_tiles, channels, size, size), the batch's images in order
                (`ftune.data.MllamaImageTransform`); None = no images (text only, or a decoding step
                after a prefill with images: the cross-attention layers read their caches).
            aspect_ratio_ids: (n,) long, with `pixel_values`.
            aspect_ratio_mask: (n, max_tiles), with `pixel_values`.
            image_sample: (n,) long, the row of each image; None for a batch of one row.
            cross_attention_mask: (b, s, images per sample, max_tiles), with `pixel_values`; when
                decoding it may be left out: each new token reads what the prompt's last token read.
            input_pos, mask: as in `TransformerDecoder.hidden`.

        Raises:
            ValueError: images without their aspect ratios or cross-attention mask, more images in a
                sample than the mask has room for, or for the decoder's own checks.
        """
        cross, embeds = None, None
        if pixel_values is not None:
            if aspect_ratio_ids is None or aspect_ratio_mask is None or cross_attention_mask is None:
                raise ValueError(
                    "CrossAttentionImageTextModel: pixel_values need aspect_ratio_ids, aspect_ratio_mask and "
                    "cross_attention_mask (ftune.data.MllamaImageTransform and padded_collate_vision give them)."
                )
            b, m = tokens.shape[0], cross_attention_mask.shape[2]
            grouped = self._grouped(b, m, pixel_values, aspect_ratio_ids, aspect_ratio_mask, image_sample)
            images = self.image_features(*grouped).view(b, -1, self.decoder.tok_embeddings.weight.shape[1])
            cross = self._cross_inputs(images, cross_attention_mask)
        elif self.decoder.caches_are_enabled() and self._last_row is not None:
            if cross_attention_mask is None:
                cross_attention_mask = self._last_row[:, None].expand(-1, tokens.shape[1], -1, -1)
            cross = self._cross_inputs(None, cross_attention_mask)
        elif self.encode_without_images and not self.decoder.caches_are_enabled():
            # A text-only batch skips the cross-attention layers (as transformers does); the blank
            # image adds zero to the embeddings, so that every rank ran the encoder and projector.
            embeds = self.decoder.tok_embeddings(tokens)  # (b, s, d)
            embeds = embeds + self.blank_image_term(embeds)
        if self.decoder.caches_are_enabled() and cross_attention_mask is not None:
            self._last_row = cross_attention_mask[:, -1]
        return self.decoder.hidden(tokens, input_pos=input_pos, mask=mask, embeds=embeds, cross_attend=cross)

    def forward(
        self,
        tokens: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        **inputs: torch.Tensor | None,
    ) -> torch.Tensor:
        """Logits (b, s, vocab_size); arguments as in `hidden`."""
        return self.project(self.hidden(tokens, pixel_values, **inputs))

    def setup_caches(
        self, batch_size: int, max_seq_len: int | None = None, dtype: torch.dtype | None = None
    ) -> None:
        """Allocate the decoder's caches: self-attention KV caches and the image key/value caches."""
        self._last_row = None
        self.decoder.setup_caches(batch_size, max_seq_len, dtype)

    def repeat_caches(self, batch_size: int) -> None:
        """`TransformerDecoder.repeat_caches`, with the prompt's last cross-attention row."""
        if self._last_row is not None:
            self._last_row = self._last_row.repeat_interleave(batch_size // self._last_row.shape[0], dim=0)
        self.decoder.repeat_caches(batch_size)

    def reset_caches(self) -> None:
        """`TransformerDecoder.reset_caches`; the images are forgotten."""
        self._last_row = None
        self.decoder.reset_caches()

    def delete_caches(self) -> None:
        """`TransformerDecoder.delete_caches`."""
        self._last_row = None
        self.decoder.delete_caches()
