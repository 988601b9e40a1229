"""Learning curves to an hour: template and transfer accuracy against the run's own CPU seconds, per method (the
study's scores under bench/results/curves/scores/, read with bench/curves/page.py)."""

from __future__ import annotations

from bench.labbook.spec import StudyPage

GRPO_ARM = "grpo_lora"


def _scores() -> dict[str, list[dict]]:
    from bench.curves.arms import RESULTS
    from bench.curves.page import load_scores

    return load_scores(RESULTS)


def per_arm() -> str:
    """Each scored arm's sentence from bench/curves/page.py (start and end on the template and past it, the CPU
    seconds to each threshold, its last slope with a 95% interval: rising, falling or flat); until a score file
    exists, that the study has not run."""
    from bench.curves.page import last_slope, mean_curve, sentence, still_iterations

    arms = _scores()
    if not arms:
        return "The study has not run yet (no score file under `bench/results/curves/scores/`): nothing to conclude."
    return " ".join(sentence(seeds[0]["label"], mean_curve(seeds, "template"), mean_curve(seeds, "transfer"),
                             last_slope(seeds), still_iterations(seeds)) for seeds in arms.values())


def against_grpo() -> str:
    """At the last mark every seed of both arms reached, each ES arm's template accuracy against GRPO's, with the
    ES arm's last slope: the answer to "does ES catch up with GRPO, pass it or flatten?". Ahead or behind only where
    both arms have two seeds or more and every seed of one lies above every seed of the other (the which-method
    page's rule); "not within an hour" where it is behind at the hour's mark."""
    from bench.curves.arms import CPU_SECONDS
    from bench.curves.page import last_slope, mean_curve

    arms = _scores()
    if GRPO_ARM not in arms or len(arms) < 2:
        return "No ES arm and GRPO arm both scored yet: no comparison."
    grpo_seeds = arms[GRPO_ARM]
    grpo = {mark: (mean, low, high) for mark, mean, low, high in mean_curve(grpo_seeds, "template")}
    parts = []
    for name, seeds in arms.items():
        if name == GRPO_ARM:
            continue
        mine = {mark: (mean, low, high) for mark, mean, low, high in mean_curve(seeds, "template")}
        shared = sorted(set(mine) & set(grpo))
        if not shared:
            continue
        mark = shared[-1]
        (mean, low, high), (other, other_low, other_high) = mine[mark], grpo[mark]
        if min(len(seeds), len(grpo_seeds)) < 2:
            place = "not yet separated (one seed) from"
        else:
            place = "ahead of" if low > other_high else "behind" if high < other_low else "within the seed range of"
        if place == "behind" and mark >= CPU_SECONDS:
            place = "behind (not caught up within an hour)"
        slope = last_slope(seeds)
        trend = ("" if slope is None else ", still rising" if slope[1] > 0 else ", falling" if slope[2] < 0
                 else ", flat within the noise")
        parts.append(f"{seeds[0]['label']} ({_count(seeds)}) {100 * mean:.1f}%{trend}, {place} "
                     f"{grpo_seeds[0]['label']} ({_count(grpo_seeds)}, {100 * other:.1f}%) at {mark:,.0f} CPU s")
    if not parts:
        return "No ES arm shares a scored mark with GRPO: no comparison."
    return "On the template, at the last mark each ES arm and GRPO both reached: " + "; ".join(parts) + "."


def _count(seeds: list[dict]) -> str:
    return "1 seed" if len(seeds) == 1 else f"{len(seeds)} seeds"


def readme_line() -> str:
    """README's one line: each scored arm's template accuracy at the last mark every arm reached, with its seeds."""
    from bench.curves.arms import RESULTS
    from bench.curves.page import mean_curve

    arms = _scores()
    if not arms:
        trained = len(list((RESULTS / "runs").glob("*.json")))
        return f"{trained} of the runs trained, none scored yet." if trained else "not run yet."
    curves = {name: {mark: mean for mark, mean, _, _ in mean_curve(seeds, "template")} for name, seeds in arms.items()}
    mark = max(set.intersection(*(set(curve) for curve in curves.values())))
    parts = [f"{seeds[0]['label']} {100 * curves[name][mark]:.1f}% ({_count(seeds)})" for name, seeds in arms.items()]
    missing = "" if GRPO_ARM in arms else "; GRPO's curve has not run yet"
    return f"{', '.join(parts)} at {mark:,.0f} CPU seconds of 2 threads{missing}."


def plot_line() -> str:
    """The plot's image line once `python -m bench.curves.page` has drawn it; nothing before (no broken image)."""
    from bench.curves.arms import RESULTS

    if not (RESULTS / "curves.png").is_file():
        return ""
    return ("![Template and transfer accuracy against the run's own CPU seconds, per arm: the seeds' mean, the band "
            "from the lowest to the highest seed](plots/curves/curves.png)")


CLAIMS = {"curves-plot": plot_line, "curves-meaning": per_arm, "curves-meaning-grpo": against_grpo,
          "curves-readme": readme_line}

PAGE = StudyPage(
    slug="curves",
    order=40,
    title="Learning curves to an hour",
    short="template and transfer accuracy against CPU seconds, per method",
    folder="curves/",
    asked="""Given an hour, does ES catch up with GRPO, pass it or flatten? And does what each method learns
carry past the training template as it trains longer?""",
    setup="""2-digit addition on the built-in model, each arm at the method study's chosen setting (an arm the study
has not tuned takes its own method's defaults, and its run file says so): lowrank-es, grpo-lora, mezo and full-es,
3 seeds each, 7,200 CPU seconds of the run's own processes at 2 threads (`training_clock: cpu`: an hour of the
quickstart's machine shape; the wall time is recorded too). The model as it stood at every 600 CPU seconds is scored
after training, on the method study's held-out questions in the template and on the transfer split, so scoring
never takes training time (every answer is generated to 64 new tokens, and the few not ended by then again at the
whole budget: the same completions as one generation at it, without a chunk of 64 decoding to the whole budget for
its one answer that never ends). An ES run's model at every mark is replayed from the update log it keeps in
`bench/results/curves/replay/`. Each run records its speed probe. An arm's last slope is the least-squares slope of its
template accuracy over its seeds' marks in the last 1,200 CPU seconds, with a 95% t interval: rising where the
interval lies above 0, falling where below, flat otherwise. The transfer split is scored at 192 tokens and checked at
64, 128 and 256: where under nine in ten of the last mark's answers ended within 192, the table says what 256 tokens
did to the score: raised it ("answers cut": the score is a floor), lowered it (answers that ran on lost correct
ones; the score at 256 is given) or left it (the unended answers run on without an answer).""",
    files=("curves/runs/*.json",),
    results="""<!-- claim:curves-table --><!-- /claim -->

<!-- claim:curves-plot --><!-- /claim -->""",
    meaning=("curves-meaning", "curves-meaning-grpo"),
    rerun="""`python -m bench.curves.run --runs RUNS_DIR` (resumable, one run at a time), then
`python -m bench.curves.score` and `python -m bench.curves.page` (the plot, `bench/results/curves/curves.png`);
`python -m bench.labbook.render` renders this page from them.""",
)
