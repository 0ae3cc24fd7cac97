"""The unpaired and reference-free preference parts of the generated configs (scripts/make_configs.py):
KTO's dataset, and the loss sections of ORPO and KTO (the DPO recipes run both)."""

from __future__ import annotations


def kto_dataset() -> str:
    return (
        "dataset:  # unpaired answers: prompt, completion, label (true: desirable); any hub id or local file\n"
        "  _component_: ftune.datasets.kto_dataset\n"
        "  source: trl-lib/kto-mix-14k\n"
        "dataset_val:  # the dataset's held-out answers\n"
        "  _component_: ftune.datasets.kto_dataset\n"
        "  source: trl-lib/kto-mix-14k\n"
        "  split: test\n"
    )


ORPO_KTO_LOSS = {
    "lora_orpo": (
        "loss:  # ORPO: NLL of the chosen answers plus beta x the odds-ratio term; no reference model runs\n"
        "  _component_: ftune.training.DPOLoss\n"
        "  loss_type: orpo\n"
        "  beta: 0.1\n"
        "  gamma: null\n"
        "  label_smoothing: 0.0\n"
        "  num_chunks: 8  # labelled tokens go to the vocabulary in blocks: never the full fp32 logits\n"
    ),
    "lora_kto": (
        "loss:  # KTO against the model with its adapters off; the KL estimate from mismatched answers\n"
        "  _component_: ftune.training.KTOLoss\n"
        "  beta: 0.1\n"
        "  desirable_weight: 1.0  # unequal counts: keep weight x count of desirable / of undesirable in [1, 4/3]\n"
        "  undesirable_weight: 1.0\n"
        "  num_chunks: 8\n"
    ),
}
