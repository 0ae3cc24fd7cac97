"""Generate text from a prompt.   ftune run generate --config generation prompt="Tell me a joke."

The prompt (with an optional system message) goes through the model's chat template, then the model
decodes with its KV cache: greedy by default, or sampled with temperature / top_k / top_p, until a
stop token or max_new_tokens. Text is printed as it is generated; speed is reported at the end.

The model is the checkpointer's folder (a base model, a merged LoRA folder or a full fine-tune's
step folder), plus `adapter_dir` (a LoRA step folder) merged in, or the quantize recipe's output
with `quantized_checkpoint`. An image-text model also reads `images` (local files, shown before the
prompt's text in the user's turn, laid out by the family's image transform).
"""

import sys
import time

from ftune import checkpointing, config, runtime
from ftune.config.image_checks import read_image
from ftune.data.messages import Message
from ftune.datasets import image_generation
from ftune.generation import GenerateSettings, generate
from ftune.generation.streaming import TextStreamer

# The settings this recipe reads; `ftune run/validate/--help` read them from here.
SETTINGS = GenerateSettings


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    if s.prompt is None:
        raise ValueError(
            'prompt is not set: pass it on the command line, e.g. prompt="Tell me a joke.", or in the config.'
        )
    images = [read_image(path, what=f"images[{i}]") for i, path in enumerate(s.images)]  # before the model
    ckpt = config.instantiate(cfg.checkpointer)
    if images:  # a text model refused before it loads
        folder = image_generation.check_image_model_folder(
            s.quantized_checkpoint or ckpt.checkpoint_dir,
            image_text=s.quantized_checkpoint is not None or getattr(ckpt, "image_text", False),
            key="images",
        )
    device, dtype = runtime.get_device(s.device), runtime.get_dtype(s.dtype)
    runtime.announce(device, dtype)
    model = checkpointing.load_inference_model(
        ckpt,
        model=cfg.model,
        adapter_dir=s.adapter_dir,
        quantized_checkpoint=s.quantized_checkpoint,
        device=device,
        dtype=dtype,
    )
    tokenizer = config.instantiate(cfg.tokenizer)
    checkpointing.check_tokenizer_fits(tokenizer.vocab_size, model)

    inputs = image_generation.ImagePrompts([])
    if images:
        transform = cfg.image_transform  # null: the family's, with its processor's published defaults
        transform = (
            config.instantiate(transform) if transform else image_generation.family_image_transform(folder)
        )
        inputs = image_generation.image_chat_prompt(
            tokenizer, transform, text=s.prompt, images=images, system=s.system
        )
        prompt = inputs.tokens[0]
    elif s.chat:
        messages = ([Message("system", s.system)] if s.system is not None else []) + [
            Message("user", s.prompt)
        ]
        prompt, _ = tokenizer.tokenize_messages(messages, add_eos=False, add_generation_prompt=True)
    else:
        if s.system is not None:
            raise ValueError(
                "system is set but chat=false: a system message needs the chat template; set chat=true."
            )
        prompt = tokenizer.encode(s.prompt, add_bos=True, add_eos=False)

    streamer = TextStreamer(tokenizer, lambda text: print(text, end="", flush=True))
    first_token_at: list[float] = []

    def on_token(token: int) -> None:
        if not first_token_at:
            first_token_at.append(time.perf_counter())
        streamer.put(token)

    start = time.perf_counter()
    tokens = generate(
        model,
        prompt,
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        stop_tokens=tokenizer.stop_tokens,
        on_token=on_token,
        seed=s.seed,
        pixel_values=inputs.pixel_values,
        image_inputs=inputs.image_inputs,
    )
    elapsed = time.perf_counter() - start
    streamer.end()
    print(flush=True)

    # The first token costs a forward over the whole prompt (prefill); the others one token each.
    prefill = (first_token_at[0] - start) if tokens else elapsed
    decode = max(elapsed - prefill, 1e-9)
    stopped = "stop token" if tokens and tokens[-1] in tokenizer.stop_tokens else "max_new_tokens"
    print(
        f"[{len(tokens)} tokens in {elapsed:.2f} s: {len(tokens) / elapsed:.1f} tokens/s; prompt {len(prompt)} "
        f"tokens in {prefill:.2f} s, then {max(len(tokens) - 1, 0) / decode:.1f} tokens/s; ended by {stopped}]",
        file=sys.stderr,
    )


if __name__ == "__main__":
    config.run(main)
