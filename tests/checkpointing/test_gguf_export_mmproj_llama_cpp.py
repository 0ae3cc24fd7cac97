"""Image-text GGUF export run by llama.cpp itself: the model file plus `mmproj-*.gguf` loaded through
llama.cpp's multimodal library (mtmd, in llama-cpp-python 0.3.36; marker `llama_cpp`, skipped without it)
with one image drawn with Pillow, against ftune's image-text forward on the same pixels.

mtmd lays out the prompt itself (the text, the image's rows, and the tokens it writes around them:
Gemma 3's <start_of_image>/<end_of_image>, Idefics3's tile and global-image tags) and preprocesses the
image itself; the image is drawn at the tower's size, so mtmd's resize keeps its pixels, and its
normalisation is the file's image mean and std. ftune runs the same token ids (read from mtmd's chunks)
with its placeholder token where the image rows go, and the pixels normalised as its image transforms
normalise them. Three checks per family: mtmd's image embeddings (`mtmd_encode_chunk`) against
`ImageTextModel.image_features`, the logits at the prompt's last position, and 8 greedy tokens.

Measured here (tiny seeded models, F32 files and an F32 KV cache, 1 thread, llama.cpp of the 0.3.36
wheel): image embeddings differ by at most 6e-4 (Gemma 3, values up to 4) and 1.4e-3 (SmolVLM, values
up to 6.4); the last logits by 1.0e-2 for Gemma 3 (8.4e-3 with a window shorter than the image;
logits up to 8; its text-only export differs by 8e-3 already, see test_gguf_export_llama_cpp.py) and
2e-4 for SmolVLM; the 8 greedy tokens are equal. A q8_0 export (Q8_0 model file, F16 projector file)
against ftune's float32 model: embeddings within 2.6e-3, last logits within 6.2e-2, the same 8 tokens.
A LoRA file of the text decoder (`--adapter-only`) over the base's two files gives the merged export's
logits within 7e-7 (the adapter moves them by 1.4). ggml's GELU (the tower's MLP) is the likely source of
the embedding difference.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_vlm_gguf import MEAN, STD, tiny_vlm_folder

from ftune.checkpointing import HFCheckpointer
from ftune.checkpointing.gguf.export import export_gguf
from ftune.models import image_text_model_from_hf_config

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python==0.3.36 (builds llama.cpp)")
mtmd = pytest.importorskip("llama_cpp.mtmd_cpp", reason="llama-cpp-python built with libmtmd")
pytestmark = [pytest.mark.llama_cpp, pytest.mark.usefixtures("one_thread")]

F32 = 0  # GGML_TYPE_F32, for the KV cache
TOLERANCE = {"gemma3": 0.03, "smolvlm": 1e-3, "smolvlm-q8_0": 0.15}  # last-position logits
EMBED_TOLERANCE = {"smolvlm-q8_0": 6e-3}  # else 3e-3 (F32 files)
SIZE = 56  # the tiny tower's image side


class Run:
    """A prompt with one image evaluated by llama.cpp + mtmd: the token layout and what it computed."""

    def __init__(self, model: Path, mmproj: Path, image: Path, prompt: str, lora: Path | None = None) -> None:
        self.llm = llama_cpp.Llama(
            str(model),
            lora_path=str(lora) if lora else None,
            n_ctx=256,
            n_batch=256,
            logits_all=True,
            verbose=False,
            n_threads=1,
            type_k=F32,
            type_v=F32,
        )
        params = mtmd.mtmd_context_params_default()
        params.use_gpu, params.n_threads, params.print_timings, params.warmup = False, 1, False, False
        self.ctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), self.llm.model, params)
        assert self.ctx, f"mtmd could not load {mmproj}"
        bitmap = mtmd.mtmd_helper_bitmap_init_from_file(self.ctx, str(image).encode(), False)
        text = mtmd.mtmd_input_text()
        data = prompt.replace("<image>", mtmd.mtmd_default_marker().decode()).encode()
        text.text, text.text_len, text.add_special, text.parse_special = data, len(data), True, True
        chunks = mtmd.mtmd_input_chunks_init()
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), bitmaps, 1) == 0
        self.layout: list[tuple[str, list[int] | int]] = []  # ("text", ids) or ("image", n rows)
        self.embeddings = []  # mtmd's rows of each image chunk
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            self._eval(mtmd.mtmd_input_chunks_get(chunks, i))
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)

    def _eval(self, chunk) -> None:
        if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            ids = [ptr[j] for j in range(n.value)]
            if ids:  # mtmd leaves an empty text chunk between two images
                self.llm.eval(ids)
                self.layout.append(("text", ids))
            return
        rows = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        assert mtmd.mtmd_encode_chunk(self.ctx, chunk) == 0
        width = self.llm.n_embd()
        out = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(self.ctx), shape=(rows * width,))
        self.embeddings.append(out.reshape(rows, width).copy())
        n_past = llama_cpp.llama_pos(0)
        status = mtmd.mtmd_helper_eval_chunk_single(
            self.ctx,
            self.llm._ctx.ctx,
            chunk,
            self.llm.n_tokens,
            0,
            self.llm.n_batch,
            False,
            ctypes.byref(n_past),
        )
        assert status == 0
        self.llm.n_tokens = n_past.value
        self.layout.append(("image", rows))

    def greedy(self, n: int) -> list[int]:
        """n greedy tokens continuing the prompt: the argmax of llama.cpp's logits, fed back."""
        out = []
        for _ in range(n):
            out.append(int(np.argmax(self.llm.scores[self.llm.n_tokens - 1])))
            self.llm.eval(out[-1:])
        return out

    def close(self) -> None:
        mtmd.mtmd_free(self.ctx)
        self.llm.close()


def _picture(path: Path) -> Path:
    """A 56 x 56 picture: a gradient, a disc and noise, so that every patch differs."""
    from PIL import ImageDraw

    g = np.random.default_rng(0)
    ramp = np.linspace(0, 255, SIZE, dtype=np.float32)
    pixels = np.stack(
        [ramp[None, :].repeat(SIZE, 0), ramp[:, None].repeat(SIZE, 1), np.full((SIZE, SIZE), 90.0)], -1
    )
    pixels = np.clip(pixels + g.normal(0, 20, pixels.shape), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    ImageDraw.Draw(image).ellipse((12, 10, 40, 38), fill=(230, 40, 60))
    image.save(path)
    return path


CASES = {  # id: (kind, window, --type)
    "gemma3": ("gemma3", 64, "f32"),
    "gemma3-window8": ("gemma3", 8, "f32"),
    "smolvlm": ("smolvlm", 64, "f32"),
    "smolvlm-q8_0": ("smolvlm", 64, "q8_0"),
}


@pytest.mark.parametrize("case", CASES)
def test_llama_cpp_runs_the_exported_vlm_with_an_image_as_ftune_does(case: str, tmp_path: Path) -> None:
    """gemma3-window8: Gemma 3's local layers see fewer tokens than the image's 16, which attend to each
    other both ways in ftune and in llama.cpp alike. smolvlm-q8_0: a Q8_0 model file and its F16
    projector file, against ftune's float32 model."""
    kind, window, file_type = CASES[case]
    folder = tiny_vlm_folder(tmp_path / "model", kind, window=window)
    exported = export_gguf(folder, tmp_path / "vlm.gguf", file_type=file_type)
    image = _picture(tmp_path / "picture.png")
    run = Run(exported.path, exported.mmproj, image, "the cat sat on <image> the mat, and the dog")

    _, _, model = image_text_model_from_hf_config(json.loads((folder / "config.json").read_text()))
    model.load_state_dict(HFCheckpointer(folder, image_text=True).load().model)
    model.eval()
    rgb = np.asarray(Image.open(image).convert("RGB"), dtype=np.float32) / 255
    pixels = torch.tensor((rgb - np.array(MEAN, np.float32)) / np.array(STD, np.float32)).permute(2, 0, 1)
    ids, images = [], []
    for part, value in run.layout:
        if part == "text":
            ids += value
        else:  # Idefics3: a tile and the global image, each the whole picture here; Gemma 3: the picture
            assert value % model.tokens_per_image == 0
            ids += [model.image_token_id] * value
            images += [pixels] * (value // model.tokens_per_image)
    assert sum(n for part, n in run.layout if part == "image") == model.tokens_per_image * len(images)
    with torch.no_grad():
        features = model.image_features(torch.stack(images)).reshape(
            -1, model.decoder.tok_embeddings.weight.shape[1]
        )
        theirs = np.concatenate(run.embeddings)
        embed_diff = np.abs(features.numpy() - theirs).max()
        logits = model(torch.tensor([ids]), torch.stack(images))[0, -1].numpy()
    logit_diff = np.abs(np.array(run.llm.scores[run.llm.n_tokens - 1]) - logits).max()
    print(f"\n{case}: max |mtmd embedding - ftune| = {embed_diff:.2e}; last logits {logit_diff:.2e}")
    assert embed_diff <= EMBED_TOLERANCE.get(case, 3e-3)
    assert logit_diff <= TOLERANCE.get(case, TOLERANCE[kind])

    theirs_tokens = run.greedy(8)
    ours = list(ids)
    with torch.no_grad():
        for _ in range(8):
            ours.append(int(model(torch.tensor([ours]), torch.stack(images))[0, -1].argmax()))
    run.close()
    assert theirs_tokens == ours[len(ids) :]


def test_llama_cpp_applies_a_vlm_lora_file_as_the_merged_export(tmp_path: Path) -> None:
    """--adapter-only of an image-text model: the base's two files plus the LoRA file in llama.cpp give
    the merged export's logits (an adapter of the decoder, trained on the model read whole)."""
    from test_gguf_export_mmproj import _vlm_adapter

    from ftune.checkpointing.gguf.export_lora import export_lora_gguf

    folder = tiny_vlm_folder(tmp_path / "model", "smolvlm")
    step = _vlm_adapter(folder, tmp_path / "run", {"decoder": ["q_proj", "v_proj"]})
    base = export_gguf(folder, tmp_path / "base.gguf", file_type="f32")
    lora = export_lora_gguf(folder, step, tmp_path / "ft.lora.gguf", file_type="f32").path
    merged = export_gguf(folder, tmp_path / "merged.gguf", file_type="f32", adapter_dir=step)
    image = _picture(tmp_path / "picture.png")
    prompt = "the cat sat on <image> the mat, and the dog"
    runs = [
        Run(base.path, base.mmproj, image, prompt, lora=lora),
        Run(merged.path, merged.mmproj, image, prompt),
    ]
    with_lora, want = (np.array(r.llm.scores[r.llm.n_tokens - 1]) for r in runs)
    plain = Run(base.path, base.mmproj, image, prompt)
    moved = np.abs(np.array(plain.llm.scores[plain.llm.n_tokens - 1]) - want).max()
    difference = np.abs(with_lora - want).max()
    print(
        f"\nVLM LoRA file: max |base + lora - merged| = {difference:.2e} (the adapter moves logits by {moved:.2e})"
    )
    for run in (*runs, plain):
        run.close()
    assert moved > 0.05
    assert difference <= 1e-4
