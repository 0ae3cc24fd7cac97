"""Quantize a checkpoint with torchao.   ftune run quantize --config quantization

Post-training quantization (PTQ) of any checkpoint, or, with `qat=true`, the convert step of
quantization-aware training: the QAT-trained float weights are prepared with the same quantizer
the QAT run used and converted to real quantized weights. An adapter folder (`adapter_dir`) is
merged into the weights first. The output folder is a native quantized checkpoint (`model.pt`,
`ftune_meta.json`, `config.json`, tokenizer files) that the generate and eval recipes load with
`quantized_checkpoint=<output_dir>`.
"""

import time
from pathlib import Path

from ftune import checkpointing, config, quantization, runtime
from ftune.checkpointing import atomic

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")


def _megabytes(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 1e6


# The settings this recipe reads; `ftune run/validate/--help` read them from here.
SETTINGS = quantization.QuantizeSettings


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    device, dtype = runtime.get_device(s.device), runtime.get_dtype(s.dtype)
    runtime.announce(device, dtype)
    ckpt = config.instantiate(cfg.checkpointer)
    inputs = {"checkpointer.checkpoint_dir": ckpt.checkpoint_dir, "adapter_dir": s.adapter_dir}
    checkpointing.check_output_dir(s.output_dir, inputs)  # before anything is read or written
    loaded = ckpt.load()
    model = checkpointing.build_float_model(
        loaded,
        checkpoint_dir=ckpt.checkpoint_dir,
        model=cfg.model,
        adapter_dir=s.adapter_dir,
        device=device,
        dtype=dtype,
    )
    quantizer = config.instantiate(cfg.quantizer)

    start = time.perf_counter()
    if s.qat:
        quantization.require_saved_ranges(quantizer, loaded.qat_ranges, ckpt.checkpoint_dir)
        # the fake quantization the QAT run trained under (with its learned ranges, if any) ...
        quantizer.prepare(model, ranges=loaded.qat_ranges)
        layers = quantizer.convert(model)  # ... made real, with the same scales
    else:
        layers = quantizer.quantize(model)
    quantize_seconds = time.perf_counter() - start

    out = Path(s.output_dir)
    for name in checkpointing.SIDE_FILES:  # tokenizer files: the folder is self-contained
        if (ckpt.checkpoint_dir / name).is_file():
            atomic.copy_file(ckpt.checkpoint_dir / name, out / name)
    # A native folder (model.pt, config.json, ftune_meta.json last): NativeCheckpointer reads it too.
    path = checkpointing.write_native(
        out,
        model.state_dict(),
        loaded.family,
        hf_config=checkpointing.read_hf_config(ckpt.checkpoint_dir),
        metadata={
            "quantizer": quantizer.spec(),
            "qat": s.qat,
            "source": str(ckpt.checkpoint_dir),
            "adapter_dir": s.adapter_dir,
        },
    )
    total_seconds = time.perf_counter() - start

    source = [p for p in ckpt.checkpoint_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    size, source_size = _megabytes([path]), _megabytes(source)
    ratio = f", {source_size / size:.1f}x smaller than the {source_size:.1f} MB source" if source_size else ""
    print(
        f"{'QAT-converted' if s.qat else 'Quantized'} {len(layers)} linear layers with {quantizer!r} in "
        f"{quantize_seconds:.1f} s ({total_seconds:.1f} s with the save).\n"
        f"Wrote {path}: {size:.1f} MB{ratio}.\n"
        f"Use it: ftune run generate --config generation quantized_checkpoint={out} prompt=...",
        flush=True,
    )


if __name__ == "__main__":
    config.run(main)
