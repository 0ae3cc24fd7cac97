"""GGUF export of a LoRA adapter, unmerged (ftune.checkpointing.gguf.export_lora): the file's metadata
and tensors against the adapter's weights, and base + alpha / rank * B @ A against the merged export.

test_gguf_export_lora_llama_cpp.py loads the file in llama.cpp over its base model.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from test_gguf_export import tiny_folder

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.export_lora import export_lora_gguf
from ftune.checkpointing.readers import read_safetensors
from ftune.cli.main import main as ftune_main
from ftune.models._meta_keys import to_meta_qk
from ftune.peft import adapter_state_dict, apply_lora

pytestmark = pytest.mark.usefixtures("one_thread")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8.0


def lora_step(
    root: Path, family: str, *, use_dora: bool = False, targets: list[str] = TARGETS
) -> tuple[Path, Path]:
    """A tiny base folder of `family` and a saved LoRA step folder whose adapters are off their zero init."""
    folder = tiny_folder(root / "base", family)
    model = load_hf(folder).eval()
    apply_lora(model, targets=targets, rank=RANK, alpha=ALPHA, use_dora=use_dora)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for value in adapter_state_dict(model).values():
            value.add_(0.1 * torch.randn(value.shape, generator=g))
    config = {"rank": RANK, "alpha": ALPHA, "use_dora": use_dora}
    return folder, HFCheckpointer(folder, root / "run").save(3, model.state_dict(), adapter_config=config)


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {
        t.name: gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        for t in gguf.GGUFReader(path).tensors
    }


@pytest.mark.parametrize("family", ["llama2", "qwen2_5"])
def test_file_holds_the_adapter_as_llama_cpp_reads_it(family: str, tmp_path: Path) -> None:
    folder, step = lora_step(tmp_path, family)
    exported = export_lora_gguf(folder, step, tmp_path / "a.gguf", file_type="f32")
    reader = gguf.GGUFReader(exported.path)
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    arch = {"llama2": "llama", "qwen2_5": "qwen2"}[family]
    assert fields["general.type"] == "adapter" and fields["adapter.type"] == "lora"
    assert fields["general.architecture"] == arch and fields["adapter.lora.alpha"] == ALPHA
    assert not any(k.startswith(("tokenizer.", f"{arch}.")) for k in fields)  # the base file has those
    peft = read_safetensors(step / "adapter_model.safetensors")
    stored = _tensors(exported.path)
    assert len(stored) == 2 * len(TARGETS) * 2 == 2 * exported.modules
    gguf_kind = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output"}
    gguf_kind |= {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
    for key in (k for k in peft if k.endswith("lora_A.weight")):
        layer, module = int(key.split(".layers.")[1].split(".")[0]), key.split(".")[-3]
        name = f"blk.{layer}.{gguf_kind[module]}.weight"
        a, b = peft[key], peft[key.replace("lora_A", "lora_B")]
        if arch == "llama" and module in ("q_proj", "k_proj"):  # B's rows follow the base's permuted rows
            b = to_meta_qk(b, 4 if module == "q_proj" else 2)
        np.testing.assert_array_equal(stored[f"{name}.lora_a"], a.numpy(), err_msg=name)  # (rank, in)
        np.testing.assert_array_equal(stored[f"{name}.lora_b"], b.numpy(), err_msg=name)  # (out, rank)


@pytest.mark.parametrize("family", ["llama2", "smollm2"])
def test_base_plus_scaled_b_times_a_is_the_merged_export(family: str, tmp_path: Path) -> None:
    """llama.cpp computes W x + alpha / rank * B (A x): per tensor, what the merged export stores."""
    folder, step = lora_step(tmp_path, family)
    base = _tensors(export_gguf(folder, tmp_path / "base.gguf", file_type="f32").path)
    merged = _tensors(export_gguf(folder, tmp_path / "merged.gguf", file_type="f32", adapter_dir=step).path)
    adapter = _tensors(export_lora_gguf(folder, step, tmp_path / "a.gguf", file_type="f32").path)
    changed = 0
    for name in base:
        want = merged[name]
        if f"{name}.lora_a" in adapter:
            a, b = adapter[f"{name}.lora_a"], adapter[f"{name}.lora_b"]
            got = base[name] + ALPHA / a.shape[0] * (b @ a)
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-6, err_msg=name)
            changed += not np.array_equal(base[name], want)
        else:
            np.testing.assert_array_equal(base[name], want, err_msg=name)
    assert changed == 2 * len(TARGETS)


def test_f16_adapter_keeps_matrices_f16(tmp_path: Path) -> None:
    folder, step = lora_step(tmp_path, "smollm2")
    path = export_lora_gguf(folder, step, tmp_path / "a.gguf", file_type="f16").path
    assert {t.tensor_type for t in gguf.GGUFReader(path).tensors} == {gguf.GGMLQuantizationType.F16}


def test_dora_and_rslora_are_refused_with_the_merged_export_to_use(tmp_path: Path) -> None:
    folder, step = lora_step(tmp_path, "smollm2", use_dora=True)
    with pytest.raises(
        ValueError, match=r"adapter_config\.json' sets use_dora=true \(a DoRA magnitude vector.*--adapter"
    ):
        export_lora_gguf(folder, step, tmp_path / "a.gguf")
    config = json.loads((step / "adapter_config.json").read_text())
    (step / "adapter_config.json").write_text(json.dumps({**config, "use_dora": False, "use_rslora": True}))
    with pytest.raises(
        ValueError, match=r"sets use_rslora=true \(llama\.cpp scales by alpha / rank\)\. Export"
    ):
        export_lora_gguf(folder, step, tmp_path / "a.gguf")
    assert not (tmp_path / "a.gguf").exists()


def test_command_writes_the_adapter_and_refuses_k_quant_types(tmp_path: Path, capsys) -> None:
    folder, step = lora_step(tmp_path, "smollm2")
    out = tmp_path / "ft.lora.gguf"
    argv = ["export", "gguf", str(folder), str(out), "--adapter", str(step), "--adapter-only"]
    assert ftune_main([*argv, "--type", "q4_k_m"]) == 1
    err = capsys.readouterr().err
    assert (
        "--type 'q4_k_m' is not a type of a LoRA adapter file (--adapter-only); llama.cpp's adapters hold"
        in err
    )
    assert ftune_main([*argv, "--type", "f16"]) == 0
    printed = capsys.readouterr().out
    assert f"Wrote {out} (a LoRA adapter of 14 matrices for llama.cpp 'llama', alpha 8, f16)" in printed
    assert f"--lora {out}" in printed and not (tmp_path / "ft.lora.Modelfile").exists()
    assert (
        ftune_main(
            ["export", "gguf", str(folder), str(tmp_path / "x.gguf"), "--adapter-only", "--type", "f16"]
        )
        == 1
    )
    assert "--adapter-only writes a LoRA step folder's adapter, unmerged, but no --adapter was given" in (
        capsys.readouterr().err
    )


def test_expert_adapters_are_refused_unmerged_and_merge(tmp_path: Path) -> None:
    folder, step = lora_step(tmp_path, "qwen3_moe", targets=["q_proj", "experts"])
    with pytest.raises(
        ValueError, match=r"the adapter changes model\.layers\.0\.mlp\.experts \(every expert"
    ):
        export_lora_gguf(folder, step, tmp_path / "a.gguf", file_type="f32")
    assert not (tmp_path / "a.gguf").exists()
    merged = export_gguf(folder, tmp_path / "m.gguf", file_type="f32", adapter_dir=step)
    base = export_gguf(folder, tmp_path / "b.gguf", file_type="f32")
    ours, theirs = _tensors(merged.path), _tensors(base.path)
    assert not np.array_equal(ours["blk.0.ffn_up_exps.weight"], theirs["blk.0.ffn_up_exps.weight"])
