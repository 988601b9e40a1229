"""Collect every JSON in bench/results/ into bench/results/README.md (numbers are copied, never typed).

    python -m bench.report
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def results(pattern: str):
    """(path, data) of every result JSON matching `pattern`, in name order."""
    for path in sorted(RESULTS.glob(pattern)):
        yield path, json.loads(path.read_text())


def section(title: str, command: str, columns: list[str], rows: list[str]) -> list[str]:
    """One result as a README section: heading, the command that made it, a table."""
    return [f"## {title}", "", f"`{command}`", "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|",
            *rows, ""]


def learning_rows(data: dict) -> list[str]:
    """One row per seed. The run is labelled by its config file as it was on the day it ran (a config in examples/
    changes between releases: the arithmetic runs of November 23 used its 10-token settings, now
    bench/configs/arithmetic_10tok.yaml) and its `--set` overrides only (no scratch paths); accuracies in percent."""
    overrides = " ".join(part.split()[0] for part in data["command"].split("--set")[1:])
    day = data.get("machine", {}).get("date", "").split(" ")[0]
    label = f"{data['config']}{f' as of {day}' if day else ''}{f' with {overrides}' if overrides else ''}"
    percent = data["metric"].endswith("accuracy")

    def show(value: float) -> str:
        return f"{100 * value:.1f}%" if percent else f"{value:.4g}"

    return [f"| {label} | {run['seed']} | {show(run['before'])} | {show(run['after'])} | "
            f"{show(max(v for _, v in run['curve']))} | {run['iteration_time_s_mean']} | {run['wall_time_s']} |"
            for run in data["runs"]]


def heldout_lines() -> list[str]:
    lines = []
    for _, d in results("learning/heldout_*.json"):
        rows = [f"| base {d['base']['model']} | {d['base']['accuracy']} | {d['base']['ci95']} | | |"]
        rows += [f"| {r['run']} (seed {r['seed']}) | **{r['accuracy']}** | {r['ci95']} | {r['only_trained_correct']} "
                 f"| {r['only_base_correct']} |" for r in d["runs"]]
        lines += section(f"Larger held-out set: {d['task']} ({d['num_prompts']} fresh prompts)", d["command"],
                         ["model", "accuracy", "95% CI", "only this model right", "only base right"], rows)
    return lines


def essa_lines() -> list[str]:
    lines = []
    for path, d in results("essa*/essa_*.json"):
        if "runs" not in d:
            continue
        rows = [f"| {r['seed']} | {r['base']:.4g} | {r['sft']:.4g} | **{r['essa']:.4g}** "
                f"| {max(v for _, v in r['curve']):.4g} | {r['wall_time_s']['sft']} | {r['wall_time_s']['essa']} "
                f"| {r['iteration_time_s_mean']} |" for r in d["runs"]]
        lines += section(f"ESSA end to end ({path.stem}, {d['metric']})", d["command"],
                         ["seed", "base", "after SFT", "after ESSA", "best during ESSA", "SFT s", "ESSA s",
                          "s/iteration"], rows)
    return lines


def population_batch_lines() -> list[str]:
    lines = []
    for _, d in results("speed/population_batch*.json"):
        rows = [f"| {arm} | {seconds} | {d['speedup_over_one_at_a_time'].get(arm, 1.0)} "
                f"| {d['identical_completions'].get(arm, 'reference')} |"
                for arm, seconds in d["median_seconds_per_population"].items()]
        lines += section(f"Population-batched adapter evaluation ({d['population_size']} candidates x "
                         f"{d['batch_size']} prompts x {d['max_new_tokens']} tokens, {d['dtype']})", d["command"],
                         ["arm", "s per population (median)", "speedup", "identical completions"], rows)
    return lines


def toy_lines() -> list[str]:
    path = RESULTS / "essa/essa_toy_digits.json"
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    rows = [f"| {start} | {arms['es']['train']:.3f} | {arms['es']['test']:.3f} | {arms['sgd']['train']:.3f} "
            f"| {arms['sgd']['test']:.3f} |" for start, arms in d["final"].items()]
    return section("ESSA Appendix E toy (sklearn digits; singular values only)", d["command"],
                   ["start", "ES train", "ES test", "SGD train", "SGD test"], rows)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.3f}" for v in value) + "]"
    return str(value)


def eval_lines() -> list[str]:
    lines = []
    for path, d in sorted(results("*/eval_*.json"), key=lambda item: item[0].name):
        if path.stem.startswith("eval_budget_"):  # a budget sweep, tabulated by eval_budget_lines
            continue
        keys = [k for k in d["results"][0] if k not in ("model", "task", "num_eval", "time_s", "reward_ci95")]
        rows = ["| " + " | ".join([r["model"]] + [_cell(r.get(k, "")) for k in keys] + [_cell(r["time_s"])]) + " |"
                for r in d["results"]]
        lines += section(f"Evaluation: {d['task']} ({path.stem}, {d['results'][0]['num_eval']} prompts, "
                         f"{d['max_new_tokens']} new tokens, {d['dtype']})", d["command"],
                         ["model", *keys, "time s"], rows)
    return lines


def ray_lines() -> list[str]:
    lines = []
    for path in sorted(RESULTS.glob("speed/ray_scaling*.json")):
        d = json.loads(path.read_text())
        backend = d.get("backend", "hf")
        lines += [f"## Ray actor pool ({backend} backend, CPU actors, one core each)", "",
                  f"`{d['command']}` ({d['note']})", "",
                  "| actors | median s/iteration | speedup | bytes exchanged per iteration | equal to one process |",
                  "|---|---|---|---|---|"]
        equal = d.get("equal_to_one_process", {})
        lines += [f"| {a['workers']} | {a['median_iteration_s']} | {d['speedup_over_first_arm'][str(a['workers'])]} "
                  f"| {a['bytes_exchanged_per_iteration']} | {equal.get(str(a['workers']), 'not checked')} |"
                  for a in d["arms"]]
        lines.append("")
    return lines


def lowrank_lines() -> list[str]:
    """`space: lowrank` (one batched generate) against `space: full` (member by member)."""
    lines = []
    for _, d in results("eggroll/lowrank_throughput*.json"):
        rows = [f"| {name.split('_')[0]} | {r['candidate_evaluations_per_second']['full']} "
                f"| {r['candidate_evaluations_per_second']['lowrank_batched']} "
                f"| **{r['cpu_speedup_over_full']['lowrank_batched']}** |" for name, r in d["results"].items()]
        lines += section(f"EGGROLL throughput: space lowrank vs full ({d['dtype']}, population "
                         f"{d['population_size']})", d["command"],
                         ["prompts per member", "full: candidates/s", "lowrank: candidates/s", "ratio (CPU time)"],
                         rows)
    return lines


def stage_lines() -> list[str]:
    """Held-out accuracy per stage (base, warm start, each method from it) with 95% intervals."""
    lines = []
    for path in sorted(RESULTS.glob("*/stages_*.json"), key=lambda path: path.name):
        d = json.loads(path.read_text())
        lines += [f"## Stages: {path.stem.removeprefix('stages_')} ({d['metric']}, n = {d['num_eval']}, 95% intervals)",
                  "", f"`{d['command']}`", "", *d["table"], ""]
    return lines


# The script behind each `evotune compare` directory (compare_<name>/); others come from
# bench/es_vs_grpo/compare_methods.sh.
COMPARE_SCRIPTS = {"lowrank_vs_full_arithmetic": "bash bench/eggroll/lowrank_learning.sh",
                   "essa_vs_grpo_arithmetic": "bash bench/essa/essa_vs_grpo.sh",
                   "essa_gsm8k": "bash bench/essa_gsm8k/essa_gsm8k.sh",
                   "essa_tuned_vs_grpo_arithmetic": "TUNED=... bash bench/essa/essa_vs_grpo.sh",
                   "countdown_small": "bash bench/countdown_small/countdown_small.sh",
                   "es_vs_grpo_time": "bash bench/es_vs_grpo/es_vs_grpo_time.sh"}
SWEEP_SCRIPTS = {"sweep_arithmetic": "bash bench/sweep_arithmetic/sweep_arithmetic.sh",
                 "essa/essa_levers": "bash bench/essa/essa_levers.sh",
                 "essa/essa_heatmap": "bash bench/essa/essa_heatmap.sh"}


def sweep_lines() -> list[str]:
    """The settings sweeps: every `evotune sweep` table a script copied here, one subsection per grid."""
    lines = []
    for name, script in SWEEP_SCRIPTS.items():
        tables = sorted((RESULTS / name).glob("*.md"))
        if not tables:
            continue
        lines += [f"## Sweep: {name.rsplit('/', 1)[-1]}", "",
                  f"`{script}` (tables by `evotune sweep`; heatmaps in `{name}/`)", ""]
        for table in tables:
            lines += [f"### {table.stem}", "", table.read_text().strip(), ""]
    return lines


def adapter_scale_lines() -> list[str]:
    lines = []
    for path, d in results("essa/adapter_scale_*.json"):
        rows = [f"| {p['singular_value_scale']} | {p['adapter_scale']:.3g} | {p['train_accuracy']:.3f} |"
                for p in d["points"]]
        lines += section(f"SFT adapter scaled as a whole ({path.stem}, {d['num_prompts']} training questions)",
                         d["command"], ["singular values x", "adapter x", "train accuracy"], rows)
    return lines


def grpo_memory_lines() -> list[str]:
    lines = []
    for _, d in results("speed/grpo_memory_*.json"):
        rows = [f"| {r['gradient_accumulation_steps']} | {r['peak_rss_mib']} | **{r['peak_rss_ratio_to_first']}** "
                f"| {r['step_time_s']} |" for r in d["runs"]]
        lines += section(f"GRPO memory: one batch vs micro-batches ({d['config']}, {d['steps']} steps; "
                         f"{d['machine']['cpu']}, {d['machine']['date']})", d["command"],
                         ["gradient_accumulation_steps", "peak RSS MiB", "ratio", "median step s"], rows)
    return lines


def pareto_lines() -> list[str]:
    """Reward against KL to the base model per run (bench/conciseness_pareto/pareto.py's table), with its script."""
    table = RESULTS / "conciseness_pareto/conciseness_pareto.md"
    if not table.exists():
        return []
    return ["## Conciseness: reward vs KL to the base model (ES grid vs GRPO beta 0 / 0.04)", "",
            "`bash bench/conciseness_pareto/conciseness_pareto.sh` (plot: `conciseness_pareto.png`)", "",
            table.read_text().strip(), ""]


def compare_lines() -> list[str]:
    """The method comparisons: each one's evotune-written table, with the script that ran it."""
    lines = []
    for directory in sorted((path for path in RESULTS.glob("*/compare_*") if (path / "compare.md").exists()),
                            key=lambda path: path.name):
        name = directory.name.removeprefix("compare_")
        script = COMPARE_SCRIPTS.get(name, "bash bench/es_vs_grpo/compare_methods.sh")
        lines += [f"## Method comparison: {name}", "", f"`{script}` (tables and plots by `evotune compare`; PNGs in "
                  f"`{directory.relative_to(RESULTS).as_posix()}/`)", "",
                  (directory / "compare.md").read_text().strip(), ""]
    return lines


def eval_budget_lines() -> list[str]:
    """Held-out accuracy at growing token budgets: where evaluation stops cutting the task's answers."""
    lines = []
    for _, d in results("eval_budget/eval_budget_*.json"):
        # each task's own metrics (accuracy, contains_solution, prompt_strict, ...), in the order it logs them
        keys = [key for key in d["rows"][0] if key not in ("max_new_tokens", "num_eval", "time_s", "skipped")
                and not key.endswith("_ci95")]
        rows = [f"| {row['max_new_tokens']} | " + " | ".join(f"{row[key]:.4g}" for key in keys)
                + f" | {row['time_s']} |" for row in d["rows"]]
        lines += section(f"Evaluation budget: {d['task']} ({d['model']}, {d['num_eval']} prompts, {d['dtype']})",
                         d["command"], ["max_new_tokens", *keys, "eval s"], rows)
    return lines


# Study results whose JSON holds its own markdown table (`table`, a list of lines) or whose script writes a
# markdown file beside it: copied as they are.
STUDY_TABLES = {"essa_quantization/essa_quantization.json": "ESSA on a quantized base (float32 / INT8 / INT4)",
                "drift/drift_arithmetic.md": "What fine-tuning costs: target accuracy, retention, KL and drift",
                "stability/stability_eval_budget_arithmetic.md":
                    "Run-to-run stability on arithmetic, at growing budgets",
                "stability/stability_eval_budget_conciseness.md":
                    "Run-to-run stability on conciseness, at growing budgets",
                "stability/stability_sources_arithmetic.md": "Where ES's run-to-run spread comes from",
                "stability/stability_formats_arithmetic.md": "What each arithmetic run writes",
                "stability/stability_averaging_arithmetic.md": "Averaging ES's last iterates",
                "stability/stability_budget_arithmetic/compare.md": "Training ES at the evaluation's token budget"}


def study_lines() -> list[str]:
    lines = []
    for name, title in STUDY_TABLES.items():
        path = RESULTS / name
        if not path.exists():
            continue
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            body = f"`{data['command']}`\n\n" + "\n".join(data["table"])
        else:
            body = path.read_text().strip()
        lines += [f"## {title}", "", body, ""]
    return lines


def reliability_lines() -> list[str]:
    """Each reliability round (bench/reliability/): every input tried and whether it held."""
    lines = []
    for path, data in results("reliability/reliability_round*.json"):
        if "inputs" not in data:
            continue
        lines += [f"## Reliability: {path.stem} ({data['held']} of {data['total']} held; "
                  f"{data['machine']['cpu']}, {data['machine']['date']})", "", f"`{data['command']}`", "",
                  "| category | input | held | exit code | seconds |", "|---|---|---|---|---|"]
        lines += [f"| {row['category']} | {row['input']} | {'held' if row['held'] else 'FAILED: ' + row['why_failed']} "
                  f"| {row['exit_code']} | {row['seconds']} |" for row in data["inputs"]]
        lines.append("")
    return lines


def gpu_check_lines() -> list[str]:
    """The GPU check's reports (bench/gpu_check/): the table the docs quote, and each device call's command."""
    from .claims.hardware import GPU_CHECK_FILES, gpu_check_table

    present = [name for name in GPU_CHECK_FILES if (RESULTS / name).exists()]
    if not present:
        return []
    def command(name: str) -> str:  # without the machine's scratch folders
        words = json.loads((RESULTS / name).read_text())["command"].split()
        scratch = ("--output", "--work-dir")
        return " ".join(word for index, word in enumerate(words)
                        if word not in scratch and words[index - 1] not in scratch)

    commands = [f"- `{name}`: `{command(name)}`" for name in present]
    return ["## GPU check (one device call per file, the same warm machine)", "", *commands,
            gpu_check_table().rstrip("\n"), ""]


def render() -> str:
    """bench/results/README.md's text, from the result files alone."""
    lines = ["# Benchmark results", "", "Written by `python -m bench.report` from the JSON files beside it; each JSON "
             "holds the command that produced it and the machine it ran on.", ""]
    learning = sorted(RESULTS.glob("learning/learning_*.json"))
    if learning:
        lines += ["## Learning (held-out metric before / after ES)", "",
                  "| run | seed | before | after | best | s/iteration | wall s |", "|---|---|---|---|---|---|---|"]
        for path in learning:
            data = json.loads(path.read_text())
            lines += [f"| **{path.stem}** ({data['metric']}) | | | | | | |"] + learning_rows(data)
        lines.append("")
    overhead = sorted(RESULTS.glob("speed/overhead_*.json"))
    if overhead:
        lines += ["## Overhead (ES iteration / plain generation of the same workload, same process)", "",
                  "| noise | task | pop | prompts | tokens | plain gen s | ES iteration s | apply s/candidate | ratio "
                  "| own time / generate | with prefetch: ratio, own time, generate / plain | machine, date |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for path in overhead:
            d = json.loads(path.read_text())
            own = d.get("breakdown_s", {}).get("es", {}).get("own_time_over_generate_median", "")
            prefetch = d.get("breakdown_s", {}).get("prefetch")
            with_prefetch = (f"{d['overhead_ratio_prefetch_median']}, {prefetch['own_time_over_generate_median']}, "
                             f"{prefetch['generate_over_plain_median']}") if prefetch else ""
            lines.append(f"| {d['noise']} | {d['task']} | {d['population_size']} | {d['batch_size']} "
                         f"| {d['max_new_tokens']} | {d['plain_generation_s']} | {d['es_iteration_s']} "
                         f"| {d['apply_one_candidate_s']} | **{d['overhead_ratio_median']}** | {own} | {with_prefetch} "
                         f"| {d['machine']['cpu']}, {d['machine']['date']} |")
        lines.append("")
    for path in sorted(RESULTS.glob("speed/memory_*.json")):
        d = json.loads(path.read_text())
        lines += [f"## Memory ({d['noise']} noise; {d['machine']['cpu']}, {d['machine']['date']})", "",
                  f"`{d['command']}`: model alone {d['model_alone_rss_mib']} MiB RSS, training "
                  f"peak {d['training_peak_rss_mib']} MiB, of which the fp32 host master copy is "
                  f"{d['host_master_copy_mib']} MiB. Ratio without the master copy "
                  f"**{d['ratio_excluding_master_copy']}**, with it {d['ratio_including_master_copy']}.", ""]
    lines += heldout_lines() + essa_lines() + population_batch_lines() + toy_lines() + eval_lines() + ray_lines()
    lines += lowrank_lines() + stage_lines() + sweep_lines() + adapter_scale_lines() + pareto_lines()
    lines += grpo_memory_lines() + eval_budget_lines() + study_lines() + gpu_check_lines() + reliability_lines()
    lines += compare_lines()
    return "\n".join(lines) + "\n"


def main() -> None:
    text = render()
    (RESULTS / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
