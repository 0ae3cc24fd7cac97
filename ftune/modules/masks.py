"""Attention masks. Convention everywhere in ftune: bool, True means "may attend"."""

import torch


def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Lower-triangular (seq_len, seq_len) bool mask: position i sees positions <= i."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def document_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Causal mask that also keeps packed documents from seeing each other.

    Args:
        document_ids: (b, s) integer ids; tokens with equal ids belong to the same document.
            Ids need only differ between neighbours; padding may take its own id.

    Returns:
        bool (b, s, s): [b, i, j] is True iff j <= i and tokens i and j are in the same document.
        The diagonal is always True, so no row is fully masked (SDPA would return NaN for one).

    Raises:
        ValueError: if `document_ids` is not 2-D.
    """
    if document_ids.dim() != 2:
        raise ValueError(
            f"document_causal_mask: document_ids must have shape (batch, seq_len), got {tuple(document_ids.shape)}."
        )
    same_doc = document_ids[:, :, None] == document_ids[:, None, :]  # (b, s, s)
    return same_doc & causal_mask(document_ids.shape[1], document_ids.device)


def image_block_mask(is_image: torch.Tensor) -> torch.Tensor:
    """Pairs of tokens in the same image: the bidirectional term over image tokens (Gemma 3).

    Args:
        is_image: (b, s) bool, True at an image's placeholder tokens. An image is a contiguous run
            of them (transformers' blocks of `token_type_ids`), so images need a token between them.

    Returns:
        bool (b, s, s): [b, i, j] is True iff tokens i and j are image tokens of the same run.

    Raises:
        ValueError: if `is_image` is not a 2-D bool tensor.
    """
    if is_image.dim() != 2 or is_image.dtype != torch.bool:
        raise ValueError(
            f"image_block_mask: is_image must be a bool tensor of shape (batch, seq_len), got {is_image.dtype} "
            f"{tuple(is_image.shape)}."
        )
    starts = is_image & ~torch.nn.functional.pad(is_image, (1, 0))[:, :-1]  # first token of each run
    run = torch.cumsum(starts, dim=1)  # (b, s): run number of each image token
    same = run[:, :, None] == run[:, None, :]  # (b, s, s)
    return same & is_image[:, :, None] & is_image[:, None, :]
