"""EGGROLL on a CPU: `space: lowrank` (Sarkar et al., "Evolution Strategies at the Hyperscale", arXiv 2511.16652:
each member a rank-r perturbation, the whole population in one batched generate) against `space: full`, in
candidate evaluations per second, and in learning at equal training time (the method study's matched arms)."""

from __future__ import annotations

from bench.claims._common import load
from bench.labbook.spec import StudyPage
from bench.method_matrix.rows import STUDY, arm, paired_over_seeds, separated

THROUGHPUT = {"bfloat16": "eggroll/lowrank_throughput.json", "float32": "eggroll/lowrank_throughput_float32.json"}
ABOUT_AS_FAST = 0.05  # a ratio within 5% of 1 reads "about as fast"


def _cpu_ratios(name: str) -> list[tuple[int, float]]:
    """(prompts per member, lowrank's candidate evaluations per CPU second over full's), fewest prompts first."""
    results = load(name)["results"]
    return sorted((int(key.split("_")[0]), value["cpu_speedup_over_full"]["lowrank_batched"])
                  for key, value in results.items())


def _at_most_prompts(ratio: float) -> str:
    if abs(ratio - 1) <= ABOUT_AS_FAST:
        return "about as fast as"
    return "faster than" if ratio < 1 else "slower than"


def speed_meaning() -> str:
    """Whether lowrank's gain over full falls as prompts per member grow, in each dtype, and how `space: full`
    compares at the most prompts per member: the page's answer to where lowrank-es's speed comes from."""
    parts, verdicts, falling = [], [], True
    for dtype, name in THROUGHPUT.items():
        ratios = _cpu_ratios(name)
        falling &= all(later < earlier for (_, earlier), (_, later) in zip(ratios, ratios[1:]))
        parts.append(f"{dtype} {ratios[0][1]:.2f}x at {ratios[0][0]} to {ratios[-1][1]:.2f}x at {ratios[-1][0]}")
        verdicts.append(f"{_at_most_prompts(ratios[-1][1])} lowrank-es in {dtype}")
    trend = "shrinks" if falling else "does not shrink at every step"
    tensors = load(THROUGHPUT["bfloat16"])["perturbed_tensors"]
    most = _cpu_ratios(THROUGHPUT["bfloat16"])[-1][0]
    return (f"On a CPU, lowrank-es's gain in candidate evaluations per CPU second {trend} as each member sees more "
            f"prompts ({'; '.join(parts)} prompts per member); at {most} prompts per member `space: full` was "
            f"{' and '.join(verdicts)}, while perturbing all {tensors['full']} weight tensors against lowrank's "
            f"{tensors['lowrank']}.")


def learning_meaning() -> str:
    """lowrank-es against full-es in the method study's matched arms (2-digit addition, each at its own tuned
    setting, equal training time): 'learned more' only where the study's own test separates them (the gap beyond
    both arms' seed spread and a paired per-question 95% interval without 0)."""
    lowrank, full = arm(STUDY, "arithmetic", "lowrank"), arm(STUDY, "arithmetic", "full_es")
    paired = paired_over_seeds(lowrank, full)
    if paired is None:
        return f"{lowrank.label} and {full.label} share no seed on 2-digit addition yet: not compared."
    gain, low, high, shared = paired
    if separated(lowrank, full):
        verdict = f"{'learned more than' if gain > 0 else 'learned less than'} {full.label}"
    else:
        verdict = f"was not separated from {full.label}"
    return (f"Matched on 2-digit addition (each tuned for itself, equal training time), {lowrank.label} {verdict}: "
            f"{gain:+.1f} points, paired over the same held-out questions of the {shared} seeds both ran "
            f"(95% interval [{low:+.1f}, {high:+.1f}]).")


CLAIMS = {"eggroll-speed-meaning": speed_meaning, "eggroll-learning-meaning": learning_meaning}

PAGE = StudyPage(
    slug="eggroll",
    order=100,
    title="EGGROLL (`space: lowrank`)",
    short="lowrank-es: throughput, and learning at equal time (matched)",
    folder="eggroll/",
    asked="How much faster does lowrank-es evaluate candidates than full-es on a CPU, and does it learn more in the "
          "same time?",
    setup="""Throughput (`bench/eggroll/lowrank_throughput.py`): SmolLM2-135M, population 32 (antithetic, 16 seeds),
rank 1, Rademacher noise, 10 new tokens per completion, one thread, 2, 8 and 32 prompts per member, the two arms
interleaved over 2 repeats, one run in bfloat16 and one in float32. `space: full` writes every member's noise into
the weights and generates member by member; `space: lowrank` generates the whole population in one batched call. The
table gives ratios of CPU time (the files also hold wall-clock time). A lowrank member's noise is r (in + out)
numbers per weight matrix instead of in x out; the update step of the 16 seeds is timed apart from the evaluations.
Learning: the method study's matched comparison, each method at its own tuned setting and equal training time
([Which method?](../which-method.md)).""",
    files=("eggroll/lowrank_throughput*.json", "method_matrix/main/arithmetic/lowrank/*.json",
           "method_matrix/main/arithmetic/full_es/*.json"),
    results="""Candidate evaluations per CPU second, lowrank over full:<!-- claim:lowrank-throughput-table -->\
<!-- /claim -->

The update step of 16 seeds, lowrank against full (bfloat16): <!-- claim:lowrank-update-step --><!-- /claim -->.
In wall-clock time: <!-- claim:lowrank-throughput-cpu --><!-- /claim -->.

Learning, matched: <!-- claim:matrix-lowrank-answer --><!-- /claim -->.

![Held-out accuracy of every arm of the method study, seeds and means](plots/method_matrix/accuracy.png)""",
    meaning=("eggroll-speed-meaning", "eggroll-learning-meaning"),
    rerun="""`python -m bench.eggroll.lowrank_throughput --batch-sizes 2 8 32 --repeats 2 --threads 1 --dtype
bfloat16` and `--dtype float32 --name lowrank_throughput_float32` write
`bench/results/eggroll/lowrank_throughput*.json`; the matched comparison is the method study's
(`bench/method_matrix/`); `python -m bench.labbook.render` renders this page from them.""",
    related="The GPU measurement of lowrank-es is [On a GPU](gpu.md); every method against every other is "
            "[Which method?](../which-method.md).",
)
