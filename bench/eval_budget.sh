#!/usr/bin/env bash
# Does the evaluation's token budget cut the answers it scores? Held-out accuracy of the base model at growing
# max_new_tokens (one thread, float32, greedy); the task's eval budget (tasks/arithmetic.py EVAL_MAX_NEW_TOKENS)
# must sit where accuracy has stopped rising. Usage: bash bench/eval_budget.sh [TASK] [NUM_EVAL]
set -euo pipefail
cd "$(dirname "$0")/.."
TASK="${1:-arithmetic}"; NUM_EVAL="${2:-256}"; OUT="bench/results/eval_budget_${TASK}"
mkdir -p "$OUT"
for tokens in 10 16 24 32 48 64; do
  [ -f "$OUT/tokens_$tokens.json" ] && continue
  OMP_NUM_THREADS=1 evotune eval --model smollm2-135m-instruct --task "$TASK" --num-eval "$NUM_EVAL" \
    --max-new-tokens "$tokens" --dtype float32 --device cpu --output "$OUT/tokens_$tokens.json"
done
python3 - "$OUT" "$TASK" "$NUM_EVAL" <<'PY'
import json, sys
from pathlib import Path
out, task, num_eval = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rows = []
for path in sorted(out.glob("tokens_*.json"), key=lambda p: int(p.stem.split("_")[1])):
    result = json.loads(path.read_text())[0]
    rows.append({"max_new_tokens": int(path.stem.split("_")[1]), "accuracy": result["accuracy"],
                 "accuracy_ci95": result["accuracy_ci95"], "time_s": result["time_s"]})
summary = {"task": task, "model": "smollm2-135m-instruct", "num_eval": num_eval, "dtype": "float32",
           "command": f"bash bench/eval_budget.sh {task} {num_eval}", "rows": rows}
(out.parent / f"eval_budget_{task}.json").write_text(json.dumps(summary, indent=2) + "\n")
print("| max_new_tokens | accuracy | 95% interval |\n|---|---|---|")
for row in rows:
    low, high = row["accuracy_ci95"]
    print(f"| {row['max_new_tokens']} | {row['accuracy']:.1%} | [{low:.1%}, {high:.1%}] |")
PY
