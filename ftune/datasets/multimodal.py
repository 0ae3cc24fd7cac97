"""Multimodal chat dataset: records with image parts -> tokens, labels and each image's pixel values.

The text path (`ftune.datasets.chat`) with images. With a chat template (ftune's HFTokenizer), the
conversation is rendered with each image part as the family's placeholder, every placeholder is
replaced in the text by the image's text (the image transform's `text`), as transformers' processor
does, and each message's text is tokenized: the ids are the processor's, even where an image's text
begins or ends with plain text that merges with its neighbours (Gemma 3's "\n\n"). Without a chat
template (a prompt format), the conversation is tokenized with the placeholders and each
placeholder token is replaced by its image's tokens. Image tokens are never trained (ignore label).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ftune.config.data_files import json_records
from ftune.config.image_checks import check_image_rows
from ftune.data.image_messages import ImageMessagesTransform, expand_placeholders
from ftune.data.image_transforms import (
    Gemma3ImageTransform,
    Idefics3ImageTransform,
    ImageInputs,
    LlavaImageTransform,
)
from ftune.data.messages import Message
from ftune.data.mllama_image import MllamaImageTransform
from ftune.datasets.sft import check_columns, labels_from_mask
from ftune.datasets.source import load_source

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

IMAGE_TRANSFORMS: dict[str, Callable[[], Any]] = {
    "gemma3": Gemma3ImageTransform,
    "idefics3": Idefics3ImageTransform,
    "smolvlm": Idefics3ImageTransform,
    "mllama": MllamaImageTransform,
    "llava": LlavaImageTransform,
}


def placeholder_id(tokenizer: Tokenizer, placeholder: str, where: str) -> int:
    """The one token id the tokenizer gives the image placeholder.

    Raises:
        ValueError: the placeholder is not one token (the tokenizer lacks the family's image token).
    """
    ids = tokenizer.encode(placeholder, add_bos=False, add_eos=False)
    if len(ids) != 1:
        raise ValueError(
            f"{where}: the tokenizer encodes the image placeholder {placeholder!r} as {len(ids)} tokens {ids[:8]}; it "
            "must be one special token. Use the tokenizer of the vision model (its tokenizer.json lists the image "
            "tokens), or the image transform of the model family the tokenizer belongs to."
        )
    return ids[0]


def _single_id(tokenizer: Tokenizer, token: str) -> int | None:
    ids = tokenizer.encode(token, add_bos=False, add_eos=False)
    return ids[0] if len(ids) == 1 else None


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def expand_image_tokens(
    tokens: Sequence[int], mask: Sequence[bool], at_id: int, expansions: Sequence[Sequence[int]], where: str
) -> tuple[list[int], list[bool], int]:
    """Replace the k-th `at_id` token by `expansions[k]`; the new tokens are masked (never trained).

    Returns:
        The tokens, their mask, and the length up to the end of the last image's tokens (0: no image).

    Raises:
        ValueError: the number of placeholders differs from the number of images.
    """
    found = sum(1 for t in tokens if t == at_id)
    if found != len(expansions):
        raise ValueError(
            f"{where}: the tokenized conversation has {found} image placeholder token(s) but the record has "
            f"{len(expansions)} image(s); an image placeholder typed in a message's text counts too, so write "
            "images only as {'type': 'image'} parts."
        )
    out_tokens: list[int] = []
    out_mask: list[bool] = []
    k = images_end = 0
    for t, m in zip(tokens, mask):
        if t == at_id:
            out_tokens.extend(expansions[k])
            out_mask.extend([True] * len(expansions[k]))
            k += 1
            images_end = len(out_tokens)
        else:
            out_tokens.append(t)
            out_mask.append(m)
    return out_tokens, out_mask, images_end


class MultimodalSFTDataset(torch.utils.data.Dataset):
    """Map-style dataset of conversations with images, tokenized and transformed on access.

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        tokenizer: the vision model's tokenizer (it must know the family's image tokens).
        message_transform: record -> (messages, images) (`ImageMessagesTransform`).
        image_transform: image -> `ImageInputs` (e.g. `Gemma3ImageTransform`).
        max_seq_len: when set, longer samples are truncated, and refused if that would cut an image.
        source: where the records came from, for messages (``<source> row N``).

    Items are {"tokens": list[int], "labels": list[int], "images": list[ImageInputs]} (Llama 3.2 Vision adds
    "cross_attention_mask" (s, n_images, max_tiles)); collate them with `ftune.data.padded_collate_vision`.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        tokenizer: Tokenizer,
        message_transform: ImageMessagesTransform,
        image_transform: Callable[[Any], ImageInputs],
        *,
        max_seq_len: int | None = None,
        source: str = "records",
    ) -> None:
        self.records, self.tokenizer, self.source = records, tokenizer, source
        self.message_transform, self.image_transform = message_transform, image_transform
        self.max_seq_len = max_seq_len
        self.image_id = placeholder_id(tokenizer, image_transform.placeholder, f"dataset {source!r}")
        self._expansions: dict[str, list[int]] = {}
        # the ids of the family's image vocabulary: never trained, wherever they appear
        names = getattr(image_transform, "image_token_strings", (image_transform.placeholder,))
        self.image_token_ids = {i for name in names if (i := _single_id(tokenizer, name)) is not None}

    def __len__(self) -> int:
        return len(self.records)

    def _expansion(self, text: str) -> list[int]:
        if text not in self._expansions:  # a family has few layouts: tokenize each once
            self._expansions[text] = self.tokenizer.encode(text, add_bos=False, add_eos=False)
        return self._expansions[text]

    def _rendered_layout(
        self, messages: list[Message], image_texts: list[str], where: str
    ) -> tuple[list[int], list[bool], int] | None:
        """Tokens, mask and the end of the last image token, from the chat template's text with every
        placeholder replaced by its image's text (None: the tokenizer renders no chat template)."""
        try:
            text = self.tokenizer.render(messages)
        except (AttributeError, ValueError):  # a prompt format, or a tokenizer without `render`
            return None
        placeholder = self.image_transform.placeholder
        if text.count(placeholder) != len(image_texts):
            raise ValueError(
                f"{where}: the rendered conversation has {text.count(placeholder)} image placeholder(s) {placeholder!r} "
                f"but the record has {len(image_texts)} image(s); a placeholder typed in a message's text counts too, "
                "so write images only as {'type': 'image'} parts."
            )
        ends = [
            _common_prefix_len(self.tokenizer.render(messages[: k + 1]), text)
            for k in range(len(messages) - 1)
        ]
        bounds = [0, *(max(ends[: k + 1]) for k in range(len(ends))), len(text)]
        tokens: list[int] = []
        mask: list[bool] = []
        images = iter(image_texts)
        for message, start, end in zip(messages, bounds, bounds[1:]):
            piece = text[start:end]  # this message's characters; a turn boundary sits at a special token
            piece = expand_placeholders(
                piece, placeholder, [next(images) for _ in range(piece.count(placeholder))]
            )
            ids = self.tokenizer.encode(piece, add_bos=False, add_eos=False)
            tokens.extend(ids)
            mask.extend(message.masked or t in self.image_token_ids for t in ids)
        if not tokens or tokens[-1] != self.tokenizer.eos_id:  # as tokenize_messages(add_eos=True)
            tokens.append(self.tokenizer.eos_id)
            mask.append(True)
        images_end = max((i + 1 for i, t in enumerate(tokens) if t in self.image_token_ids), default=0)
        return tokens, mask, images_end

    def read(self, record: Mapping[str, Any], where: str) -> tuple[list[Message], list[ImageInputs]]:
        """A record's conversation and its images through the image transform (read once, for every
        sequence made of them: a preference pair's two answers, a prompt's completions).

        Raises:
            ValueError: a record the message transform refuses (`where` prefixed).
        """
        try:
            messages, images = self.message_transform(record)
        except (ValueError, KeyError) as e:
            text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise ValueError(f"{where}: {text}") from e
        return messages, [self.image_transform(image) for image in images]

    def prompt_tokens(self, messages: list[Message], inputs: list[ImageInputs], where: str) -> list[int]:
        """A prompt's token ids, ending where the assistant's reply begins, its images' tokens laid out
        (as the processor lays out a prompt it is given whole; for generation and GRPO's rollouts).

        Raises:
            ValueError: placeholders and images differ in number.
        """
        try:
            text = self.tokenizer.render(messages, add_generation_prompt=True)
        except (AttributeError, ValueError):  # a prompt format: splice the image tokens into its ids
            tokens, mask = self.tokenizer.tokenize_messages(
                messages, add_eos=False, add_generation_prompt=True
            )
            expansions = [self._expansion(x.text) for x in inputs]
            return expand_image_tokens(tokens, mask, self.image_id, expansions, where)[0]
        text = expand_placeholders(text, self.image_transform.placeholder, [x.text for x in inputs])
        return self.tokenizer.encode(text, add_bos=False, add_eos=False)

    def __getitem__(self, index: int) -> dict[str, Any]:
        where = f"Dataset {self.source} row {index + 1}"
        return self.laid_out(*self.read(self.records[index], where), where)

    def laid_out(self, messages: list[Message], inputs: list[ImageInputs], where: str) -> dict[str, Any]:
        """The item of a conversation and its transformed images: tokens, labels, images (see the class)."""
        laid_out = self._rendered_layout(messages, [x.text for x in inputs], where)
        if laid_out is None:  # no chat template: splice the image tokens in place of the placeholder ids
            tokens, mask = self.tokenizer.tokenize_messages(messages, add_eos=True)
            expansions = [self._expansion(x.text) for x in inputs]
            tokens, mask, images_end = expand_image_tokens(tokens, mask, self.image_id, expansions, where)
        else:
            tokens, mask, images_end = laid_out
        labels = labels_from_mask(tokens, mask)
        limits = [
            n for n in (self.max_seq_len, getattr(self.tokenizer, "max_seq_len", None)) if n is not None
        ]
        limit = min(limits, default=None)
        if limit is not None and len(tokens) > limit:
            if images_end > limit:
                raise ValueError(
                    f"{where}: the sample is {len(tokens)} tokens and max_seq_len={limit} (of the dataset or the "
                    f"tokenizer) would cut through its images' tokens (they end at token {images_end}; the model needs "
                    "all of them). Raise dataset.max_seq_len (and tokenizer.max_seq_len), or shorten the record."
                )
            tokens, labels = tokens[:limit], labels[:limit]
        item = {"tokens": list(tokens), "labels": labels, "images": inputs}
        if hasattr(self.image_transform, "sample_inputs"):  # Llama 3.2 Vision: its cross-attention mask
            item.update(self.image_transform.sample_inputs(item["tokens"], inputs, self.image_id))
        return item


def image_transform_of(value: Any) -> Any:
    """The image transform a dataset argument names (a family name) or is (a component)."""
    if isinstance(value, str):
        if value not in IMAGE_TRANSFORMS:
            raise ValueError(
                f"multimodal_chat_dataset: image_transform={value!r} is not a model family with an image transform; "
                f"accepted names are {sorted(IMAGE_TRANSFORMS)}, or a component such as "
                "{_component_: ftune.data.Gemma3ImageTransform, image_size: 896}."
            )
        return IMAGE_TRANSFORMS[value]()
    if not callable(value) or not isinstance(getattr(value, "placeholder", None), str):
        raise ValueError(
            f"multimodal_chat_dataset: image_transform is {type(value).__name__}, not an image transform (a callable "
            "with a `placeholder` string); give a family name (gemma3, idefics3, mllama, llava) or a transform component."
        )
    return value


def multimodal_chat_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    image_transform: Any,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    column_map: dict[str, str] | None = None,
    train_on_input: bool = False,
    new_system_prompt: str | None = None,
    image_dir: str | None = None,
    max_seq_len: int | None = None,
    packed: bool = False,
) -> MultimodalSFTDataset:
    """Conversations with images (OpenAI/transformers-style messages with image parts), trained on the assistant turns.

    Every image of every record is read when the dataset loads, so an unreadable one fails now with its
    row; `ftune run` reads those of a local file before the model loads.

    Args:
        tokenizer: the vision model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .parquet) or folder, or builder name.
        image_transform: the family's transform (a component, e.g. ftune.data.Gemma3ImageTransform) or a family
            name: "gemma3", "idefics3" (= "smolvlm"), "mllama" (their published defaults) or "llava" (SigLIP at
            224 px, 16 px patches).
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"messages": ..., "images": ...} -> your column names.
        train_on_input: also train on user turns (system turns and image tokens are never trained).
        new_system_prompt: replace any system turn with this one.
        image_dir: the folder relative image paths are read from (default: the data file's folder, or the
            working directory for a hub dataset).
        max_seq_len: truncate each sample (a cut through an image's tokens is refused).
        packed: refused: packing samples with images is not supported.

    Returns:
        A `MultimodalSFTDataset` (collate with `ftune.data.padded_collate_vision`).

    Raises:
        ValueError: packed=True, an unknown image transform, a missing column, an unreadable image (row named).
    """
    if packed:
        raise ValueError(
            f"multimodal_chat_dataset (source {source!r}): packed=True is not supported with images (a pack would "
            "mix several samples' images and their cross-sample attention); set dataset.packed=false."
        )
    transform = image_transform_of(image_transform)
    base = image_base_dir(source, image_dir)
    messages = ImageMessagesTransform(
        transform.placeholder,
        train_on_input=train_on_input,
        column_map=column_map,
        new_system_prompt=new_system_prompt,
        base_dir=base,
    )
    records, rows = image_records(
        source,
        messages.required_columns,
        "multimodal_chat_dataset",
        data_files=data_files,
        split=split,
        name=name,
    )
    check_image_rows(rows, messages.columns["messages"], messages.columns["images"], base, source)
    return MultimodalSFTDataset(
        records, tokenizer, messages, transform, max_seq_len=max_seq_len, source=source
    )


def image_base_dir(source: str, image_dir: str | None) -> Path | None:
    """The folder an image dataset's relative image paths are read from: `image_dir`, else the data
    file's folder or the data folder itself, else None (the working directory, for a hub dataset)."""
    if image_dir is not None:
        return Path(image_dir).expanduser()
    path = Path(source).expanduser()
    return path.parent if path.is_file() else path if path.is_dir() else None


def image_records(
    source: str,
    required_columns: Sequence[str],
    owner: str,
    *,
    records: Sequence[Mapping[str, Any]] | None = None,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
) -> tuple[Any, list[tuple[str, Mapping[str, Any]]]]:
    """An image dataset's records, and each with the name its errors give (file:line, or source row n).

    A local .json/.jsonl train file is read with `json` (content that is a string in one turn and
    parts in another stays so); anything else through `load_source`, its columns checked first.
    `records` given in memory are taken as they are.

    Returns:
        (records, [(row name, record), ...]), for `check_image_rows` and the builder.

    Raises:
        ValueError: a missing column (`owner` and `source` named), a line that is not JSON.
    """
    path = Path(source).expanduser()
    if records is not None:
        return records, [(f"{source} row {i + 1}", r) for i, r in enumerate(records)]
    if (
        path.is_file()
        and data_files is None
        and split == "train"
        and (lines := json_records(path)) is not None
    ):
        return [record for _, record in lines], [(f"{path}:{number}", record) for number, record in lines]
    loaded = load_source(source, data_files=data_files, split=split, name=name)
    check_columns(loaded, list(required_columns), owner, source)
    return loaded, [(f"{source} row {i + 1}", loaded[i]) for i in range(len(loaded))]
