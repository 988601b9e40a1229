#!/usr/bin/env bash
# Does the evaluation's token budget cut the answers it scores? Held-out accuracy of the base model at growing
# max_new_tokens (one thread, float32, greedy); the task's eval budget (tasks/arithmetic.py EVAL_MAX_NEW_TOKENS)
# must sit where accuracy has stopped rising. Usage: [TOKENS="10 16 24"] bash bench/eval_budget/eval_budget.sh [TASK] [NUM_EVAL]
# Other tasks (every numeric metric is kept; retention tasks are evaluated at their own budget, tasks/*.py):
#   TOKENS="32 64 128 256" bash bench/eval_budget/eval_budget.sh conciseness 128
#   TOKENS="128 256 512 1024" bash bench/eval_budget/eval_budget.sh ifeval 24
set -euo pipefail
cd "$(dirname "$0")/../.."
TASK="${1:-arithmetic}"; NUM_EVAL="${2:-256}"; OUT="bench/results/eval_budget/eval_budget_${TASK}"
mkdir -p "$OUT"
for tokens in ${TOKENS:-10 16 24 32 48 64}; do
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
    metrics = {key: value for key, value in result.items()
               if isinstance(value, (int, float)) or key.endswith("_ci95")}  # every task's own metrics
    rows.append({"max_new_tokens": int(path.stem.split("_")[1]), **metrics})
summary = {"task": task, "model": "smollm2-135m-instruct", "num_eval": num_eval, "dtype": "float32",
           "command": f"TOKENS=\"{' '.join(str(row['max_new_tokens']) for row in rows)}\" "
                      f"bash bench/eval_budget/eval_budget.sh {task} {num_eval}", "rows": rows}
(out.parent / f"eval_budget_{task}.json").write_text(json.dumps(summary, indent=2) + "\n")
keys = [key for key in rows[0] if key not in ("max_new_tokens", "num_eval") and not key.endswith("_ci95")]
print("| max_new_tokens | " + " | ".join(keys) + " |\n" + "|---" * (len(keys) + 1) + "|")
for row in rows:
    print(f"| {row['max_new_tokens']} | " + " | ".join(f"{row[key]:.4g}" for key in keys) + " |")
PY
