"""torchtune's DPO, distillation, QAT + LoRA and lm-eval configs through `ftune convert torchtune-config`.

Each config here is written in torchtune 0.6.1's schema (the keys its recipes read); the converted
config must carry the values over to ftune's components and validate as `ftune validate` does.
"""

import math

import pytest
import torch

from ftune.config import instantiate
from ftune.torchtune import (
    conversion_problems,
    convert_torchtune_config,
    infer_recipe,
    leaf_keys,
    load_torchtune_yaml,
)
from ftune.training.methods.dpo_loss import PairLogps

COMMON = """
output_dir: /tmp/torchtune/llama3_2_1B/run
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Llama-3.2-1B-Instruct/original/tokenizer.model
  max_seq_len: 1024
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Llama-3.2-1B-Instruct/
  checkpoint_files: [model.safetensors]
  output_dir: ${output_dir}
  model_type: LLAMA3_2
resume_from_checkpoint: False
seed: 42
batch_size: 2
epochs: 1
optimizer:
  _component_: torch.optim.AdamW
  lr: 1e-5
device: cpu
dtype: bf16
"""
LORA_MODEL = """
model:
  _component_: torchtune.models.llama3_2.lora_llama3_2_1b
  lora_attn_modules: [q_proj, v_proj]
  lora_rank: 8
  lora_alpha: 16
"""
FULL_MODEL = """
model:
  _component_: torchtune.models.llama3_2.llama3_2_1b
"""
DPO = """
dataset:
  _component_: torchtune.datasets.stack_exchange_paired_dataset
loss:
  _component_: torchtune.rlhf.loss.DPOLoss
  beta: 0.25
  label_smoothing: 0.1
"""
REF = """
ref_checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: FOLDER
  checkpoint_files: [model.safetensors]
  output_dir: ${output_dir}
  model_type: LLAMA3_2
"""
KD = """
teacher_model:
  _component_: torchtune.models.llama3_1.llama3_1_8b
teacher_checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Meta-Llama-3.1-8B-Instruct/
  checkpoint_files: [model-00001-of-00004.safetensors]
  recipe_checkpoint: null
  output_dir: ${output_dir}
  model_type: LLAMA3
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
kd_loss:
  _component_: torchtune.modules.loss.ForwardKLWithChunkedOutputLoss
kd_ratio: 0.25
"""
EVAL = """
output_dir: ./
model:
  _component_: torchtune.models.llama3_2.llama3_2_1b
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Llama-3.2-1B-Instruct
  checkpoint_files: [model.safetensors]
  output_dir: ${output_dir}
  model_type: LLAMA3_2
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Llama-3.2-1B-Instruct/original/tokenizer.model
  max_seq_len: null
device: cpu
dtype: bf16
seed: 1234
tasks: ["truthfulqa_mc2", "hellaswag"]
limit: 10
max_seq_length: 2048
batch_size: 8
enable_kv_cache: True
include_path: my_tasks
quantizer: null
"""


def convert(text: str, **kwargs):
    tt = load_torchtune_yaml(text)
    conv = convert_torchtune_config(tt, **kwargs)
    assert sorted(r.key for r in conv.report) == sorted(leaf_keys(tt))  # every key reported, once
    return conv


def unsupported(conv) -> dict[str, str]:
    return {r.key: r.detail for r in conv.unsupported}


def test_dpo_loss_keeps_beta_and_label_smoothing_and_computes_torchtunes_loss():
    conv = convert(COMMON + LORA_MODEL + DPO)
    assert conv.recipe == "lora_dpo_single_device" and not conv.unsupported
    assert conv.config["loss"] == {
        "_component_": "ftune.training.DPOLoss",
        "loss_type": "sigmoid",
        "beta": 0.25,
        "label_smoothing": 0.1,
        "num_chunks": 8,
    }
    assert conversion_problems(conv) == []
    # torchtune's DPOLoss: -(1 - e) log sigmoid(b h) - e log sigmoid(-b h), h the log-ratio margin
    loss_fn = instantiate(conv.config["loss"])
    counts = torch.tensor([3.0])
    policy = PairLogps(torch.tensor([-4.0]), torch.tensor([-6.0]), counts, counts)
    reference = PairLogps(torch.tensor([-5.0]), torch.tensor([-5.5]), counts, counts)
    h = (-4.0 + 5.0) - (-6.0 + 5.5)
    sig = 1 / (1 + math.exp(-0.25 * h))
    expected = -(0.9 * math.log(sig) + 0.1 * math.log(1 - sig))
    assert loss_fn(policy, reference).losses.item() == pytest.approx(expected, rel=1e-6)


def test_dpo_loss_without_arguments_gets_torchtunes_defaults():
    conv = convert(COMMON + LORA_MODEL + DPO.replace("  beta: 0.25\n  label_smoothing: 0.1\n", ""))
    assert conv.config["loss"]["beta"] == 0.1 and conv.config["loss"]["label_smoothing"] == 0.0


@pytest.mark.parametrize("args, gamma", [("\n  gamma: 0.3", 0.3), ("", 0.1)])
def test_rso_loss_becomes_dposs_hinge_with_gamma_as_beta(args, gamma):
    text = DPO.replace("DPOLoss\n  beta: 0.25\n  label_smoothing: 0.1", "RSOLoss" + args)
    conv = convert(COMMON + LORA_MODEL + text)
    assert conv.recipe == "lora_dpo_single_device" and not conv.unsupported
    assert conv.config["loss"] == {
        "_component_": "ftune.training.DPOLoss",
        "loss_type": "hinge",
        "beta": gamma,  # torchtune's default 0.1 written out when absent
        "num_chunks": 8,
    }
    assert conversion_problems(conv) == []
    # torchtune's RSOLoss: relu(1 - gamma h), h the log-ratio margin; one pair inside the margin, one past it
    loss_fn = instantiate(conv.config["loss"])
    counts = torch.tensor([3.0, 3.0])
    policy = PairLogps(torch.tensor([-4.0, -1.0]), torch.tensor([-6.0, -30.0]), counts, counts)
    reference = PairLogps(torch.tensor([-5.0, -5.0]), torch.tensor([-5.5, -5.5]), counts, counts)
    h = [(-4.0 + 5.0) - (-6.0 + 5.5), (-1.0 + 5.0) - (-30.0 + 5.5)]
    expected = [max(0.0, 1 - gamma * x) for x in h]
    assert loss_fn(policy, reference).losses.tolist() == pytest.approx(expected, rel=1e-6)
    assert expected[0] > 0 and expected[1] == 0


def test_preference_datasets_become_preference_dataset_with_their_source_and_columns():
    cfg = convert(COMMON + LORA_MODEL + DPO).config
    assert cfg["dataset"] == {
        "_component_": "ftune.datasets.preference_dataset",
        "source": "lvwerra/stack-exchange-paired",
        "data_files": "data/rl/**",
        "column_map": {"prompt": "question", "chosen": "response_j", "rejected": "response_k"},
    }
    hh = "  _component_: torchtune.datasets.hh_rlhf_helpful_dataset\n  train_on_input: true\n"
    cfg = convert(
        COMMON
        + LORA_MODEL
        + DPO.replace("  _component_: torchtune.datasets.stack_exchange_paired_dataset\n", hh)
    ).config
    assert cfg["dataset"] == {
        "_component_": "ftune.datasets.preference_dataset",
        "source": "RLHFlow/HH-RLHF-Helpful-standard",
        "train_on_input": True,
    }


def test_full_dpo_reference_is_the_checkpointers_folder_or_unsupported():
    text = COMMON + FULL_MODEL + DPO + REF.replace("FOLDER", "/tmp/Llama-3.2-1B-Instruct/")
    assert infer_recipe(load_torchtune_yaml(text)) == "full_dpo_distributed"
    conv = convert(text)
    assert conv.recipe == "full_dpo_distributed" and not conv.unsupported
    assert "ref_checkpointer" not in conv.config and "peft" not in conv.config
    assert conversion_problems(conv) == []
    conv = convert(COMMON + FULL_MODEL + DPO + REF.replace("FOLDER", "/tmp/my-sft-model"))
    assert list(unsupported(conv)) == ["ref_checkpointer.checkpoint_dir"]
    assert unsupported(conv)["ref_checkpointer.checkpoint_dir"] == (
        "/tmp/my-sft-model: ftune's full_dpo_distributed takes the reference from the checkpointer's starting "
        "weights (/tmp/Llama-3.2-1B-Instruct); a reference model from another folder is not supported"
    )


def test_kd_config_maps_teacher_and_kd_ratio_onto_kdloss():
    conv = convert(COMMON + LORA_MODEL + KD)
    assert conv.recipe == "knowledge_distillation_single_device" and not conv.unsupported
    cfg = conv.config
    assert cfg["loss"] == {"_component_": "ftune.training.KDLoss", "kd_ratio": 0.25, "num_chunks": 8}
    assert cfg["teacher_model"] == {"_component_": "ftune.models.llama3_1.llama3_1_8b"}
    assert cfg["teacher_checkpointer"] == {
        "_component_": "ftune.checkpointing.HFCheckpointer",
        "checkpoint_dir": "${ftune_home:}/models/Meta-Llama-3.1-8B-Instruct",
        "output_dir": "${output_dir}",
        "model_type": "llama3_1",  # the teacher's family, not the student's
    }
    assert cfg["teacher_tokenizer"] == {  # torchtune tokenizes once: the student's tokenizer
        "_component_": "ftune.models.llama3_2.llama3_2_tokenizer",
        "path": "${ftune_home:}/models/Llama-3.2-1B-Instruct/original/tokenizer.model",
    }
    assert cfg["model"] == {"_component_": "ftune.models.llama3_2.llama3_2_1b"} and cfg["peft"]["rank"] == 8
    assert conversion_problems(conv) == []
    kinds = {r.key: r.status for r in conv.report}
    assert kinds["kd_ratio"] == "mapped" and kinds["loss._component_"] == "covered"


def test_kd_defaults_and_what_ftunes_kdloss_cannot_do():
    conv = convert(
        COMMON + FULL_MODEL + KD.replace("kd_ratio: 0.25\n", ""), recipe="knowledge_distillation_distributed"
    )
    assert conv.recipe == "knowledge_distillation_distributed" and not conv.unsupported
    assert conv.config["loss"]["kd_ratio"] == 0.5  # torchtune's recipes: cfg.get("kd_ratio", 0.5)
    assert "peft" not in conv.config and conversion_problems(conv) == []
    text = COMMON + FULL_MODEL + KD.replace("ForwardKLWithChunkedOutputLoss", "LogitsKLLoss")
    assert unsupported(convert(text))["kd_loss._component_"].endswith("no ftune counterpart in the table")
    text = COMMON + FULL_MODEL + KD.replace("llama3_1.llama3_1_8b", "llama3_1.lora_llama3_1_8b")
    assert (
        "merge a trained adapter into it with teacher_adapter_dir"
        in unsupported(convert(text))["teacher_model._component_"]
    )


@pytest.mark.parametrize(
    "component, args, want",
    [
        ("ReverseKLWithChunkedOutputLoss", "", {"kl": "reverse"}),
        ("SymmetricKLWithChunkedOutputLoss", "", {"kl": "symmetric", "sym_kd_ratio": 0.5}),
        (
            "SymmetricKLWithChunkedOutputLoss",
            "\n  sym_kd_ratio: 0.8",
            {"kl": "symmetric", "sym_kd_ratio": 0.8},
        ),
        ("ReverseKLWithChunkedOutputLoss", "\n  num_output_chunks: 4", {"kl": "reverse", "num_chunks": 4}),
    ],
)
def test_reverse_and_symmetric_kl_become_kdloss_kl(component, args, want):
    text = COMMON + FULL_MODEL + KD.replace("ForwardKLWithChunkedOutputLoss", component + args)
    conv = convert(text)
    assert conv.recipe == "knowledge_distillation_single_device" and not conv.unsupported
    assert conv.config["loss"] == {
        "_component_": "ftune.training.KDLoss",
        "kd_ratio": 0.25,
        "num_chunks": 8,
        **want,
    }
    assert conversion_problems(conv) == []
    loss_fn = instantiate(conv.config["loss"])
    assert loss_fn.kl == want["kl"] and loss_fn.sym_kd_ratio == want.get("sym_kd_ratio")


def test_qat_lora_config_gets_the_quantizer_and_the_peft_section():
    text = (
        COMMON
        + LORA_MODEL
        + """
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
quantizer:
  _component_: torchtune.training.quantization.Int8DynActInt4WeightQATQuantizer
  groupsize: 32
"""
    )
    conv = convert(text)
    assert conv.recipe == "qat_lora_finetune_distributed" and not conv.unsupported
    assert conv.config["quantizer"] == {
        "_component_": "ftune.quantization.Int8DynActInt4Weight",
        "group_size": 32,
    }
    assert conv.config["peft"]["targets"] == ["q_proj", "v_proj"]
    assert conversion_problems(conv) == []


def test_eleuther_eval_config_runs_its_tasks_with_the_eval_recipe():
    conv = convert(EVAL)
    assert conv.recipe == "eval" and not conv.unsupported
    cfg = conv.config
    assert cfg["lm_eval_tasks"] == ["truthfulqa_mc2", "hellaswag"]
    assert (cfg["lm_eval_limit"], cfg["lm_eval_max_length"], cfg["batch_size"]) == (10, 2048, 8)
    assert cfg["lm_eval_include_path"] == "my_tasks"
    assert "limit" not in cfg and "seed" not in cfg and "heldout_file" not in cfg
    assert conversion_problems(conv) == []
    status = {r.key: r.status for r in conv.report}
    assert (
        status["seed"]
        == status["enable_kv_cache"]
        == status["quantizer"]
        == status["output_dir"]
        == "covered"
    )

    quantized = EVAL.replace(
        "quantizer: null",
        "quantizer:\n  _component_: torchtune.training.quantization.Int8DynActInt4WeightQuantizer",
    )
    assert unsupported(convert(quantized.replace("seed: 1234", "seed: 7"))) == {
        "seed": "7: ftune's eval has no seed key: it runs with lm-eval's own seeds (1234)",
        "quantizer._component_": "eval does not quantize at load: it reads the quantize recipe's output "
        "(quantized_checkpoint=<its output_dir>)",
    }


TP = """
tensor_parallel_dim: 2
tensor_parallel_plan:
  _component_: torchtune.models.llama3.base_llama_tp_plan
"""


def test_tensor_parallel_keys_map_to_ftunes_mesh_and_plan():
    conv = convert(COMMON + FULL_MODEL + TP, recipe="full_finetune_distributed")
    assert conv.recipe == "full_finetune_distributed" and not conv.unsupported
    assert conv.config["tensor_parallel_dim"] == 2 and "tensor_parallel_plan" not in conv.config
    lora = convert(COMMON + LORA_MODEL + TP, recipe="lora_finetune_distributed")
    assert unsupported(lora) == {
        "tensor_parallel_dim": "2: lora_finetune_distributed has no tensor parallelism (full_finetune_distributed has)"
    }
