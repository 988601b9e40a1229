"""Claims of the speed studies: the ES loop's costs, generation, shared prefixes, vLLM, Ray, population
batching and low-rank throughput."""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from bench.claims._common import load, pct, relation, speedups_text


def lowrank_throughput_cpu() -> str:
    data = load("eggroll/lowrank_throughput.json")
    ratios = {key.split("_")[0]: value["speedup_over_full"]["lowrank_batched"]
              for key, value in data["results"].items()}
    return (", ".join(f"{ratio:.2f}x at {prompts} prompts per member" for prompts, ratio in ratios.items())
            + f" ({data['dtype']}, {data['torch_threads']} thread)")


def lowrank_throughput_table() -> str:
    """Candidate evaluations per CPU second of `space: lowrank` over `space: full`, per prompts per member and
    dtype (the wall-clock ratios are in the same files)."""
    files = {"bfloat16 (`dtype: auto` here)": "eggroll/lowrank_throughput.json",
             "float32": "eggroll/lowrank_throughput_float32.json"}
    ratios = {label: {key.split("_")[0]: value["cpu_speedup_over_full"]["lowrank_batched"]
                      for key, value in load(name)["results"].items()} for label, name in files.items()}
    lines = ["", "", f"| prompts per member | {' | '.join(files)} |", "|---|---|---|"]
    for prompts in next(iter(ratios.values())):
        lines.append(f"| {prompts} | {' | '.join(f'{ratios[label][prompts]:.2f}x' for label in files)} |")
    return "\n".join(lines) + "\n\n"


def grpo_memory() -> str:
    runs = sorted(load("speed/grpo_memory_grpo_conciseness.json")["runs"],
                  key=lambda run: run["gradient_accumulation_steps"])
    return " and ".join(f"{run['peak_rss_mib']:,.0f} MiB in {run['gradient_accumulation_steps']} micro-batch"
                        f"{'es' if run['gradient_accumulation_steps'] > 1 else ''}" for run in runs)


def _shared_prefix_rows(dtype: str) -> dict:
    return {row["task"]: row for row in load(f"speed/shared_prefix_{dtype}.json")["results"]}


def shared_prefix() -> str:
    results = _shared_prefix_rows("float32")
    arithmetic, countdown = results["arithmetic"], results["countdown"]
    identical = all(row["completions_identical"] for row in results.values())
    return (f"arithmetic ({arithmetic['prompts']} prompts x {arithmetic['max_new_tokens']} tokens) "
            f"{arithmetic['speedup_median']:.2f}x faster, Countdown ({countdown['prompts']} prompts x "
            f"{countdown['max_new_tokens']} tokens) {countdown['speedup_median']:.2f}x; the completions "
            f"{'identical' if identical else 'not identical'} in every repeat")


def shared_prefix_medians() -> str:
    arithmetic = _shared_prefix_rows("float32")["arithmetic"]
    return (f"arithmetic: {median(arithmetic['shared_prefix_s']):.2f} s against "
            f"{median(arithmetic['plain_s']):.2f} s median")


def shared_prefix_bfloat16() -> str:
    rows = _shared_prefix_rows("bfloat16")
    arithmetic, countdown = rows["arithmetic"], rows["countdown"]
    return (f"{arithmetic['speedup_median']:.2f}x faster on arithmetic, but {max(arithmetic['differing_completions'])} "
            f"of {arithmetic['prompts']} arithmetic and {max(countdown['differing_completions'])} of "
            f"{countdown['prompts']} Countdown completions differ")


def shared_prefix_dtypes() -> str:
    bfloat16, float32 = _shared_prefix_rows("bfloat16")["arithmetic"], _shared_prefix_rows("float32")["arithmetic"]
    plain, prefixed = median(bfloat16["plain_s"]), median(float32["shared_prefix_s"])
    took = relation(plain, prefixed, "longer than", "less time than", "as long as", tolerance=0.1)
    return (f"bfloat16 without the prefill took {took} float32 with it ({median(bfloat16['plain_s']):.2f} s and "
            f"{median(float32['shared_prefix_s']):.2f} s median, from the two result files: separate runs, not "
            f"interleaved), and bfloat16 with it (`shared_prefix: true`, {max(bfloat16['differing_completions'])} of "
            f"{bfloat16['prompts']} completions changed) {median(bfloat16['shared_prefix_s']):.2f} s")


def loop_cost() -> str:
    data = load("speed/overhead_rademacher_arithmetic_10tok_float32.json")
    return (f"one ES iteration ({data['population_size']} antithetic candidates x {data['batch_size']} prompts x "
            f"{data['max_new_tokens']} tokens) took {data['overhead_ratio_median']:.3f}x the plain generation of the "
            f"same tokens (median of {len(data['es_iteration_s'])}), and {data['overhead_ratio_legacy_median']:.3f}x "
            f"with the loop's code from before (timed in the same run)")


def loop_apply_share() -> str:
    data = load("speed/overhead_rademacher_arithmetic_10tok_float32.json")
    generate = median(data["plain_generation_s"]) / data["population_size"]
    return (f"`apply`, {data['apply_one_candidate_s']:.2f} s per candidate against {generate:.1f} s of generation "
            f"({pct(data['apply_one_candidate_s'] / generate)}), bound by memory traffic (reading the "
            f"{data['bytes_per_candidate']['master_bytes'] / 1e6:.0f} MB fp32 master and writing the weights)")


def _breakdown(name: str, arm: str) -> tuple[dict, dict]:
    data = load(f"speed/overhead_rademacher_arithmetic_10tok_float32_{name}.json")
    return data, data["breakdown_s"][arm]


def loop_breakdown_one_core() -> str:
    data, es = _breakdown("one_core", "es")
    seconds, share = es["seconds"], es["share_of_generation"]
    rest = sum(seconds[part] for part in ("ask", "tell", "rewards", "other", "sync"))
    population = data["population_size"]
    return (f"generate {seconds['generate']:.1f}, `apply` {seconds['apply']:.2f} ({population} x "
            f"{seconds['apply'] / population:.2f}, {pct(seconds['apply'] / seconds['generate'])} of generate), the "
            f"update `step` {seconds['step']:.2f} ({pct(share['step'])}), `restore` {seconds['restore']:.2f}, the "
            f"finiteness check {seconds['mean_is_finite']:.2f}, ask/tell/rewards/Python together {rest:.3f}; own time "
            f"{pct(es['own_time_over_generate_median'])} of generate, ratio {data['overhead_ratio_median']:.3f}")


def prefetch_one_core() -> str:
    data, prefetch = _breakdown("one_core", "prefetch")
    es = data["breakdown_s"]["es"]
    return (f"the loop's own time falls to {pct(prefetch['own_time_over_generate_median'])} of generate (`apply` "
            f"{prefetch['seconds']['apply']:.2f} s: only the first candidate of an iteration is written in the loop, "
            f"after the update; `step` {prefetch['seconds']['step']:.2f} s), and generate takes "
            f"{pct(prefetch['generate_over_plain_median'] - 1)} longer than plain generation "
            f"({pct(es['generate_over_plain_median'])} without the worker, in the same run), ratio "
            f"{data['overhead_ratio_prefetch_median']:.3f}")


def loop_breakdown_unpinned() -> str:
    data, es = _breakdown("breakdown", "es")
    prefetch = data["breakdown_s"]["prefetch"]
    return (f"the ratio was {data['overhead_ratio_median']:.3f} with the current loop (own time "
            f"{pct(es['own_time_over_generate_median'])} of generate: `apply` {es['seconds']['apply']:.2f} s, `step` "
            f"{es['seconds']['step']:.2f} s), {data['overhead_ratio_legacy_median']:.3f} with the loop's code from "
            f"before, {data['overhead_ratio_prefetch_median']:.3f} with `prefetch_candidates` (own time "
            f"{pct(prefetch['own_time_over_generate_median'])}, generate "
            f"{pct(prefetch['generate_over_plain_median'] - 1)} slower than plain)")


def prefetch_idle_core_ranges() -> str:
    data = load("speed/overhead_rademacher_arithmetic_10tok_float32_idle_second_core.json")
    def span(values):
        return f"{min(values):.1f}-{max(values):.1f} s"
    steps = [row["step"] for arm in data["breakdown_s"].values() for row in arm["per_repeat"]]
    first = [row["apply"] for row in data["breakdown_s"]["prefetch"]["per_repeat"]]
    return (f"plain generation {span(data['plain_generation_s'])}, the ES iteration {span(data['es_iteration_s'])}, "
            f"with `prefetch_candidates` {span(data['es_iteration_prefetch_s'])}; what stays in the loop is the update "
            f"({min(steps):.2f}-{max(steps):.2f} s, 8 seeds' noise) and the first candidate's `apply` "
            f"({median(first):.2f} s)")


def loop_floor() -> str:
    restores, generates = [], []
    for name in ("one_core", "breakdown", "idle_second_core"):
        data, es = _breakdown(name, "es")
        restores.append(es["seconds"]["restore"])
        generates.append(es["seconds"]["generate"] / data["population_size"])
    master = data["bytes_per_candidate"]["master_bytes"] / 1e6
    return (f"a plain copy of SmolLM2's {master:.0f} MB (`restore`) took "
            f"{min(restores):.3f}-{max(restores):.3f} s, {pct(min(restores) / max(generates))}-"
            f"{pct(max(restores) / min(generates))} of one candidate's generate "
            f"({min(generates):.1f}-{max(generates):.1f} s)")


def generation_throughput_cpu() -> str:
    data = load("speed/generation_throughput_cpu_arithmetic_10tok.json")
    return f"{data['vllm']['tokens_per_s']:.0f} vs {data['hf']['tokens_per_s']:.0f} generated tokens/s"


def peer_loop() -> str:
    ratios = load("speed/peer_es_at_scale.json")["paper_loop_over_evotune_median"]
    return (f"the paper's loop takes {ratios['evotune']:.2f}x evotune's iteration time (median of 3), "
            f"{ratios['evotune_shared_prefix_off']:.2f}x with evotune's shared prefix off")


def prefetch_idle_core() -> str:
    data = load("speed/overhead_rademacher_arithmetic_10tok_float32_idle_second_core.json")
    return (f"ES iteration / plain generation {data['overhead_ratio_median']:.3f} without and "
            f"{data['overhead_ratio_prefetch_median']:.3f} with `prefetch_candidates` (medians of "
            f"{len(data['es_iteration_s'])})")


def vllm_cpu() -> str:
    """The two backends' runs side by side. Their held-out scores were read at 10 new tokens, which cut answers
    (evaluation-budget.md): they show the backends agree, not what the run learned, and the text says so."""
    data = load("speed/vllm_cpu_vs_hf_arithmetic.json")
    same = data["identical_rewards"] and data["final_weights_equal"]
    both = all(data[key]["vllm"] == data[key]["hf"] for key in ("accuracy_before", "accuracy_after"))
    scores = (f"held-out {pct(data['accuracy_before']['vllm'])} -> {pct(data['accuracy_after']['vllm'])}"
              f"{' on both' if both else ' (vLLM)'}, {data['held_out_prompts']} prompts scored at 10 new tokens, "
              "which cut answers: a check that the backends agree, not an accuracy")
    return (f"the hf backend's run {'identical (every reward, final weights equal' if same else 'different ('}; "
            f"{scores}); {data['es_iteration_s_mean']['vllm']} vs {data['es_iteration_s_mean']['hf']} s per ES "
            "iteration")


def vllm_prefix_cache() -> str:
    smol, tiny = (load(f"speed/vllm_prefix_cache_{name}.json")["results"] for name in ("smollm2", "tiny"))
    arithmetic = smol[0]
    per_call = [off / on for off, on in zip(arithmetic["off_s"], arithmetic["on_s"])]
    same = all(row["completions_identical"] for row in (*smol, *tiny))
    return (f"{'the same completions' if same else 'different completions'}, and no speed-up: SmolLM2 "
            f"{min(per_call):.2f}x-{max(per_call):.2f}x per call on arithmetic ({arithmetic['prompts']} prompts x "
            f"{arithmetic['max_new_tokens']} tokens, median {arithmetic['speedup_median']:.3f}x) and median "
            f"{smol[1]['speedup_median']:.3f}x on Countdown ({smol[1]['prompts']} x {smol[1]['max_new_tokens']}), the "
            f"tiny test model medians {tiny[0]['speedup_median']:.3f}x and {tiny[1]['speedup_median']:.3f}x")


def dtype_avx512_bf16() -> str:
    data = load("speed/dtype_speed_intel_xeon_avx512bf16.json")
    ratios = {part: data[part]["bfloat16_over_float32"] for part in ("generation", "forward", "backward")}
    return ", ".join(f"{ratio:.2f}x ({part})" for part, ratio in ratios.items())


def lowrank_update_step() -> str:
    seconds = load("eggroll/lowrank_throughput.json")["update_step_seconds"]
    return f"{seconds['lowrank']['wall']:.2f} s against {seconds['full']['wall']:.2f} s"


def ray_vllm() -> str:
    data = load("speed/ray_scaling_vllm.json")
    (arm,) = data["arms"]
    equal = data["equal_to_one_process"][str(arm["workers"])]
    return (f"A Ray pool of {arm['workers']} vLLM engine actors {'equals' if equal else 'differs from'} one process "
            f"and exchanges {arm['bytes_exchanged_per_iteration']:,} bytes per iteration")


def engine_close() -> str:
    data = load("speed/engine_close.json")
    ours, alone = data["evotune worker extension"], data["vllm alone"]
    return (f"{ours['close_s_median']:.1f} s with evotune's worker extension, which freezes the heap of vLLM's "
            f"worker process at its exit, against {alone['close_s_median']:.1f} s for vLLM alone (median of "
            f"{data['repeats']}, side by side)")


def engine_start() -> str:
    data = load("speed/engine_close.json")
    return (f"{data['evotune worker extension']['start_s_median']:.1f} s (median of {data['repeats']}) for the "
            f"doctor's tiny Llama with its engine core in its own process, on {data['machine'].split(', ')[-1]}")


PRECISIONS = {"float32": "float32", "int8": "INT8", "int4": "INT4 (nf4)"}


def ray_coordinator_table() -> str:
    """The simulated coordinator at 10, 100 and 1,000 workers (bench/ray_cluster/simulate.py), with Ray's
    per-message cost measured on a real cluster folded into the last column."""
    lines = ["", "", "| workers | population x shards = units | driver CPU ms / iteration | share of 60 s | "
             "bytes / iteration | messages | with Ray's per-message cost: share |", "|---|---|---|---|---|---|---|"]
    for row in load("ray_cluster/ray_coordinator_simulated.json")["rows"]:
        lines.append(f"| {row['workers']} | {row['population']} x {row['shards']} = {row['units_per_iteration']} | "
                     f"{row['driver_cpu_s_per_iteration'] * 1000:.1f} | {row['share_of_iteration']:.3%} | "
                     f"{row['bytes_per_iteration']:,} | {row['messages_per_iteration']} | "
                     f"{row['estimated_share_with_ray']:.2%} |")
    return "\n".join(lines) + "\n\n"


def ray_coordinator_cost() -> str:
    per_call = load("ray_cluster/ray_call_cost.json")["driver_cpu_s_per_call"]
    largest = max(load("ray_cluster/ray_coordinator_simulated.json")["rows"], key=lambda row: row["workers"])
    return (f"{per_call * 1000:.2f} ms per message (bench/results/ray_cluster/ray_call_cost.json). With it, the "
            f"coordinator "
            f"costs {largest['estimated_share_with_ray']:.2%} of a 60 s iteration at {largest['workers']:,} workers")


def ray_two_nodes_table() -> str:
    """The real 2-node runs of bench/ray_cluster/two_nodes.py against one process, one row per arm and file."""
    lines = ["", "", "| run (examples/arithmetic.yaml, 2 iterations, SmolLM2-135M, float32) | s per iteration | "
             "reward_mean per iteration | result file |", "|---|---|---|---|"]
    first = {"single_process": "one process (torch on both cores)",
             "two_nodes": "2 nodes x 1 CPU, 2 actors (`worker_num_cpus: 1`)"}
    again = {"single_process": "one process, again", "two_nodes": "2 nodes x 1 CPU, again"}
    for file, names in (("ray_cluster/ray_two_nodes_arithmetic.json", first),
                        ("ray_cluster/ray_two_nodes_arithmetic_single_rerun.json", again),
                        ("ray_cluster/ray_two_nodes_arithmetic_two_nodes_rerun.json", again)):
        data = load(file)
        for arm, name in names.items():
            if arm in data:
                lines.append(f"| {name} | {', '.join(f'{s:.1f}' for s in data[arm]['iteration_s'])} | "
                             f"{', '.join(f'{r:.4f}' for r in data[arm]['reward_mean'])} | {file} |")
    return "\n".join(lines) + "\n\n"


def ray_two_nodes_bytes() -> str:
    exchanged = load("ray_cluster/ray_two_nodes_arithmetic.json")["two_nodes"]["bytes_exchanged"]
    return " and ".join(f"{value / 1000:.1f} kB" for value in exchanged)


def population_batch_cpu() -> str:
    return speedups_text(load("speed/population_batch_full_cpu.json"))


def population_batch_cpu_decoding() -> str:
    return speedups_text(load("speed/population_batch_full_cpu_decoding.json"))


def own_loop_cpu() -> str:
    data = load("speed/overhead_gaussian_arithmetic_10tok_own_loop.json")
    ratios = [own / plain for own, plain in zip(data["plain_generation_own_loop_s"], data["plain_generation_s"])]
    return (f"{data['own_loop_over_plain_median']}x this path's time (median of {len(ratios)} alternating repeats, "
            f"per repeat {min(ratios):.2f}-{max(ratios):.2f}x")


def compile_generation_cpu() -> str:
    data = load("speed/compile_generation_cpu.json")
    same, total = data["identical_completions"].split("/")
    compile_seconds = data["first_call_seconds"]["compiled"] - data["first_call_seconds"]["eager"]
    return (f"the same {same} of {total} completions as eager generation and no speed worth its "
            f"{compile_seconds:.0f} s compile ({data['speedup_compiled_over_eager']:.2f}x")


def own_loop_overhead() -> str:
    ratio = load("speed/overhead_gaussian_arithmetic_10tok_own_loop.json")["overhead_ratio_median"]
    return f"{ratio:.2f}x plain generation"


def omp_wait_policy() -> str:
    """The quickstart's step alone and beside a busy neighbour, under OpenMP's spinning default and passive threads
    (bench/speed/omp_wait_policy.py)."""
    data = load("speed/omp_wait_policy.json")
    arms, ratios = data["arms"], data["beside_a_neighbour_over_alone"]
    default, passive = list(ratios)
    alone = data["passive_over_default_alone"]

    def step(arm: str) -> str:
        return f"{arms[arm]['cpu_s_per_step']:.1f} CPU s ({arms[arm]['wall_s_per_step']:.1f} s wall)"

    return (f"beside a busy neighbour a step took {ratios[default]['cpu_s']:.2f}x its CPU seconds alone with spinning "
            f"threads ({step(default + ', alone')} -> {step(default + ', beside a busy neighbour')}), "
            f"{ratios[passive]['cpu_s']:.2f}x with passive ones ({step(passive + ', alone')} -> "
            f"{step(passive + ', beside a busy neighbour')}); alone, passive threads cost {alone['wall_s']:.2f}x the "
            f"wall time and {alone['cpu_s']:.2f}x the CPU seconds (the quickstart's steps, {data['machine']['cpu']}, "
            f"{data['threads']} cores)")


CLAIMS: dict[str, Callable[[], str]] = {
    "omp-wait-policy": omp_wait_policy,
    "grpo-memory": grpo_memory,
    "lowrank-throughput-cpu": lowrank_throughput_cpu,
    "lowrank-throughput-table": lowrank_throughput_table,
    "ray-coordinator-table": ray_coordinator_table,
    "ray-two-nodes-table": ray_two_nodes_table,
    "ray-two-nodes-bytes": ray_two_nodes_bytes,
    "population-batch-cpu": population_batch_cpu,
    "population-batch-cpu-decoding": population_batch_cpu_decoding,
    "own-loop-cpu": own_loop_cpu,
    "shared-prefix": shared_prefix,
    "shared-prefix-medians": shared_prefix_medians,
    "shared-prefix-bfloat16": shared_prefix_bfloat16,
    "shared-prefix-dtypes": shared_prefix_dtypes,
    "loop-cost": loop_cost,
    "loop-apply-share": loop_apply_share,
    "loop-breakdown-one-core": loop_breakdown_one_core,
    "prefetch-one-core": prefetch_one_core,
    "loop-breakdown-unpinned": loop_breakdown_unpinned,
    "prefetch-idle-core-ranges": prefetch_idle_core_ranges,
    "loop-floor": loop_floor,
    "generation-throughput-cpu": generation_throughput_cpu,
    "peer-loop": peer_loop,
    "prefetch-idle-core": prefetch_idle_core,
    "vllm-cpu": vllm_cpu,
    "ray-vllm": ray_vllm,
    "engine-close": engine_close,
    "engine-start": engine_start,
    "compile-generation-cpu": compile_generation_cpu,
    "own-loop-overhead": own_loop_overhead,
    "ray-coordinator-cost": ray_coordinator_cost,
    "vllm-prefix-cache": vllm_prefix_cache,
    "dtype-avx512-bf16": dtype_avx512_bf16,
    "lowrank-update-step": lowrank_update_step,
}
