"""ESSA on a quantized base: float32, INT8 and INT4 (nf4) bases under one SFT adapter, then ESSA on each. Reproduces
in small form the quantized-base setting of ESSA (Korotyshova, Shaposhnikov et al., arXiv 2507.04453)."""

from __future__ import annotations

from bench.claims._common import load
from bench.claims.speed import PRECISIONS
from bench.labbook.pages.essa import Move, chance_verdict, points
from bench.labbook.spec import StudyPage

QUANTIZED = ("int8", "int4")
SHORT = {"float32": "float32", "int8": "INT8", "int4": "INT4"}


def _table() -> dict:
    return load("essa_quantization/essa_quantization.json")


def _rows(precision: str) -> list[dict]:
    return sorted((row for row in _table()["rows"] if row["precision"] == precision), key=lambda row: row["seed"])


def _float32_by_seed() -> dict[int, dict]:
    return {row["seed"]: row for row in _rows("float32")}


def sft_cost_moves(precision: str) -> list[Move]:
    """The float32-trained SFT adapter on a quantized base against the same adapter on float32, per seed."""
    reference, n = _float32_by_seed(), _table()["num_eval"]
    return [Move(f"{PRECISIONS[precision]} on seed {row['seed']}", reference[row["seed"]]["sft_alone"]["value"],
                 row["sft_alone"]["value"], n) for row in _rows(precision)]


def meaning_cost() -> str:
    """What each quantized base costs the float32-trained adapter before any evolution, per seed, against chance."""
    parts = []
    for precision in QUANTIZED:
        moves = sft_cost_moves(precision)
        beyond = sum(move.beyond for move in moves)
        verdict = ("beyond chance on every seed" if beyond == len(moves) else "within chance" if not beyond
                   else f"beyond chance on {beyond} of {len(moves)} seeds")
        parts.append(f"{' / '.join(points(move.change) for move in moves)} points on {SHORT[precision]}, {verdict}")
    return (f"Before evolution (seeds 0 / 1, n = {_table()['num_eval']}), a quantized base changes the "
            f"float32-trained adapter's score by {', and '.join(parts)}.")


def essa_gains() -> list[tuple[dict, Move]]:
    """ESSA's end against the SFT adapter alone on the same base, per base and seed, with its table row."""
    n = _table()["num_eval"]
    return [(row, Move(f"{SHORT[row['precision']]} seed {row['seed']}", row["sft_alone"]["value"],
                       row["essa"]["end"]["value"], n)) for precision in PRECISIONS for row in _rows(precision)]


def meaning_essa() -> str:
    """Whether ESSA wins back on a quantized base what quantization cost: its gains against chance, the largest
    gain against the same base's other seed, and INT4 after ESSA against float32 after ESSA, per seed."""
    pairs = essa_gains()
    gains = [move for _, move in pairs]
    top, largest = max(pairs, key=lambda pair: pair[1].change)
    other = [(row, move) for row, move in pairs if row["precision"] == top["precision"] and move is not largest]
    reference = _float32_by_seed()
    iterations = sorted({row["essa"]["iterations"] for row in _table()["rows"]})
    gap = [Move(f"seed {row['seed']}", reference[row["seed"]]["essa"]["end"]["value"], row["essa"]["end"]["value"],
                _table()["num_eval"]) for row in _rows("int4")]
    behind = all(move.beyond and move.change < 0 for move in gap)
    won_back = any(move.beyond and move.change > 0 for move in gains)
    others = " / ".join(f"{points(move.change)} on seed {row['seed']}" for row, move in other)
    largest_text = f"; the largest gain, {points(largest.change)} points on {largest.label}, is {others}" * bool(other)
    return (f"ESSA {'wins some of it back' if won_back else 'does not win it back'} in "
            f"{'/'.join(map(str, iterations))} iterations: {chance_verdict(gains, 'ESSA gain')}{largest_text}. "
            f"After ESSA, INT4 scores {' / '.join(points(move.change) for move in gap)} points against float32 "
            f"({'beyond chance on every seed' if behind else 'not beyond chance on every seed'}): the paper's "
            f"INT4 close to bfloat16 (here: float32) is {'not reproduced' if behind else 'not ruled out'}.")


def meaning_tokens() -> str:
    """Whether the SFT adapter scores the same at every token budget checked, on every base and seed: whether the
    table's token budget cuts answers."""
    checks = _table()["token_check_sft_accuracy"]
    budgets = sorted({int(budget) for scores in checks.values() for budget in scores})
    differing = [run for run, scores in checks.items() if len(set(scores.values())) > 1]
    listed = ", ".join(map(str, budgets[:-1])) + f" and {budgets[-1]}"
    if not differing:
        return (f"The token budget does not cut answers: the SFT adapter scores the same at {listed} new tokens on "
                "every base and seed.")
    return f"The SFT adapter's score changes with the token budget ({listed} new tokens) on {', '.join(differing)}."


def meaning_memory() -> str:
    """Quantized bases' peak RSS against float32's, in the side-by-side generation and in the ESSA runs (mean of
    seeds), against how much the weights shrink: whether the smaller weights make a smaller process."""
    memory = load("essa_quantization/quantization_speed.json")["memory"]
    means = _table()["mean_over_seeds"]
    weights = {precision: memory[precision]["base_memory_footprint_mib"] for precision in PRECISIONS}
    shrink = " / ".join(f"{weights['float32'] / weights[precision]:.1f}x" for precision in QUANTIZED)
    generating = {precision: memory[precision]["peak_rss_generating_mib"] for precision in PRECISIONS}
    training = {precision: means[precision]["peak_rss_mib"] for precision in PRECISIONS}
    smaller = [precision for precision in QUANTIZED
               if generating[precision] < generating["float32"] or training[precision] < training["float32"]]
    verdict = ("yet no quantized process is smaller than float32's" if not smaller else
               f"and {' and '.join(SHORT[precision] for precision in smaller)} peak lower in at least one")
    tail = "; the paper's fraction of the memory does not show in this peak RSS" if not smaller else ""
    return (f"Memory: the weights shrink {shrink} (INT8 / INT4), {verdict}: peak RSS is "
            f"{' / '.join(f'{generating[p]:.0f}' for p in PRECISIONS)} MiB generating side by side and "
            f"{' / '.join(f'{training[p]:.0f}' for p in PRECISIONS)} MiB in the ESSA runs "
            f"({' / '.join(SHORT.values())}, mean of the seeds){tail}.")


def meaning_time() -> str:
    """The quantized bases' generation time against float32's side by side, at both workloads; and which bases'
    seconds per iteration in the table overlap between seeds, which that column cannot rank."""
    small = load("essa_quantization/quantization_speed.json")["time"]
    large = load("essa_quantization/quantization_speed_128prompts.json")["time"]
    ratios = {p: (small[p]["wall_s_ratio_to_float32"], large[p]["wall_s_ratio_to_float32"]) for p in QUANTIZED}
    every = [ratio for pair in ratios.values() for ratio in pair]
    verdict = ("slower than float32" if min(every) > 1 else "faster than float32" if max(every) < 1
               else "neither always faster nor always slower than float32")
    spans = {p: (min(row["essa"]["seconds_per_iteration"] for row in _rows(p)),
                 max(row["essa"]["seconds_per_iteration"] for row in _rows(p))) for p in PRECISIONS}
    keys = list(PRECISIONS)
    overlapping = [f"{SHORT[a]} and {SHORT[b]}" for i, a in enumerate(keys) for b in keys[i + 1:]
                   if spans[a][0] <= spans[b][1] and spans[b][0] <= spans[a][1]]
    column = (f"the table's seconds per iteration of {', '.join(overlapping)} overlap across seeds "
              f"({'; '.join(f'{SHORT[p]} {spans[p][0]}-{spans[p][1]}' for p in PRECISIONS)}), so that column does "
              "not rank them" if overlapping else
              "the table's seconds per iteration do not overlap between bases")
    return (f"Time: side by side, both quantized bases are {verdict}: "
            + " and ".join(f"{SHORT[p]} takes {ratios[p][0]:.2f}x / {ratios[p][1]:.2f}x" for p in QUANTIZED)
            + f" its time at 16 / 128 prompts; {column}.")


CLAIMS = {
    "quantization-meaning-cost": meaning_cost,
    "quantization-meaning-essa": meaning_essa,
    "quantization-meaning-tokens": meaning_tokens,
    "quantization-meaning-memory": meaning_memory,
    "quantization-meaning-time": meaning_time,
}

PAGE = StudyPage(
    slug="quantization",
    order=120,
    title="ESSA on a quantized base",
    short="float32, INT8 and INT4 bases: accuracy, speed, memory",
    folder="essa_quantization/",
    asked="ESSA's paper evolves an adapter on an INT8 or INT4 base, reporting INT4 close to bfloat16 at a fraction "
          "of the memory. On a CPU and the built-in model: what does a quantized base cost in speed, memory and "
          "accuracy, and does ESSA on it win the accuracy back?",
    setup="""`bench/essa_quantization/` (`quantization_speed.py`, `essa_quantization.sh`, `quantization_table.py`); no
plots, its results are the tables below.

- **Speed and memory** (`python -m bench.essa_quantization.quantization_speed`): SmolLM2-135M as an HF directory,
  its base in float32, INT8 or INT4 (nf4) under the same rank-8 LoRA adapter, one process per precision with one
  thread, greedy generation of 16 arithmetic prompts x 16 new tokens, 5 interleaved rounds (bitsandbytes 0.50.2:
  INT8 through `torch._int_mm`, INT4 through its fused bfloat16 CPU kernel); again at 128 prompts x 10 new tokens,
  the rows of one batched ESSA generate, 3 rounds (`python -m bench.essa_quantization.quantization_speed --prompts
  128 --new-tokens 10 --repeats 3 --name quantization_speed_128prompts`); torch.profiler over one generate for
  where the time goes.
- **The precision table** (`bash bench/essa_quantization/essa_quantization.sh`, tabulated by
  `python -m bench.essa_quantization.quantization_table --runs RUNS --seeds 0 1 --num-eval 512 --max-new-tokens 10
  --token-check 6 32 --name essa_quantization`): an SFT adapter trained on the float32 base
  (`examples/sft_arithmetic.yaml`), then ESSA from it (`examples/essa_arithmetic.yaml` as it was then: 15
  iterations x population 24 x 32 prompts, the same for every base; the file now gives 8 prompts per member) on a
  float32, INT8 and INT4 base, seeds 0 and 1, held-out n = 512 at 10 new tokens; the SFT adapter alone on each
  base, also at 6 and 32 new tokens; peak RSS and seconds per iteration per run. Re-running it skips finished runs
  and resumes interrupted ones; its smoke form (`bench/results/essa_quantization/essa_quantization_smoke.json`,
  n = 16) shows the plumbing, not a result.""",
    notes=("The precision table's seconds per iteration were measured while other jobs shared the machine; the "
           "side-by-side generation runs compare the precisions' speed.",
           "bitsandbytes asks on import for a faster 4-bit CPU kernel (`gemm_4bit_forward` from the Hub's "
           "kernels-community, through the PyPI package `kernels`); it is fetched from the Hub, so offline it does "
           "not load and bitsandbytes falls back to the fused kernel above.",
           "Beyond chance means outside what a 95% two-proportion test allows, on the accuracies the result files "
           "record (as on [ESSA on 2-digit addition](essa.md)).",
           "The paper reports its memory advantage for 7-8B models on GPUs."),
    files=("essa_quantization/*.json",),
    results="""One generate of 16 prompts per base:<!-- claim:quantization-speed-table --><!-- /claim -->

At 128 prompts x 10 new tokens, <!-- claim:quantization-speed --><!-- /claim -->.
The speed ratios to compare the precisions by: <!-- claim:quantization-ratios --><!-- /claim -->.

Where the time goes (torch.profiler, one generate): <!-- claim:quantization-profile --><!-- /claim -->.

Memory: <!-- claim:quantization-memory --><!-- /claim -->.

The precision table, both seeds:<!-- claim:essa-quantization-table --><!-- /claim -->

Per base: <!-- claim:essa-quantization --><!-- /claim -->.
Quantization's cost before evolution, on that mean: <!-- claim:quantization-sft-cost --><!-- /claim -->.""",
    meaning=("quantization-meaning-cost", "quantization-meaning-essa", "quantization-meaning-tokens",
             "quantization-meaning-memory", "quantization-meaning-time"),
    rerun="""`python -m bench.essa_quantization.quantization_speed` (speed and memory, and again with
`--prompts 128 --new-tokens 10 --repeats 3 --name quantization_speed_128prompts`),
`bash bench/essa_quantization/essa_quantization.sh` then `python -m bench.essa_quantization.quantization_table --runs
RUNS --seeds 0 1 --num-eval 512 --max-new-tokens 10 --token-check 6 32 --name essa_quantization` (the precision
table); `python -m bench.labbook.render` renders this page from them.""",
)
