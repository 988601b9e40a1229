"""Does what ES learns transfer past its template? The quickstart against what a skeptic would change first, each
for the same CPU seconds, scored in the template and on the transfer split."""

from __future__ import annotations

from bench.labbook.spec import StudyPage

SHORT_NAMES = {
    "quickstart": "the quickstart",
    "phrasings4": "training across 4 phrasings",
    "prompts16": "16 prompts per member",
    "es_at_scale_paper": "full-es at the ES at Scale paper's settings",
    "full_es": "full-es at its defaults",
    "lora_es": "lora-es at its defaults",
    "grpo_lora": "grpo-lora",
}


def _runs_by_variant() -> dict[str, list[dict]]:
    """Every measured run, grouped by its variant (the folder it trained in)."""
    from bench.transfer.variants import result_files, variant

    found: dict[str, list[dict]] = {}
    for data in result_files():
        for run in data["runs"]:
            found.setdefault(variant(run["run"]), []).append(run)
    return found


def _interval_side(runs: list[dict], gain: str) -> str:
    """'above' where every seed's 95% interval of the paired gain lies above 0, 'below' where every one lies below,
    else 'holds 0'; gain picks the template ('gain_ci95') or the transfer split's interval."""
    intervals = [run["gain_ci95"] if gain == "template" else run["transfer"]["gain_ci95"] for run in runs]
    if all(low > 0 for low, _ in intervals):
        return "above"
    if all(high < 0 for _, high in intervals):
        return "below"
    return "holds 0"


def _named(names: list[str]) -> str:
    return ", ".join(SHORT_NAMES.get(name, name) for name in names) if names else "none"


def gains_beyond_zero() -> str:
    """Which variants' paired gains have 95% intervals above (or below) 0 on every seed, past the template and in
    it: where the study shows any gain at all, and how much rarer one is past the template."""
    found = _runs_by_variant()
    if not found:
        return "The study has not run yet: nothing to conclude."
    sides = {where: {name: _interval_side(runs, where) for name, runs in found.items()}
             for where in ("transfer", "template")}

    def listed(where: str, side: str) -> list[str]:
        return [name for name, value in sides[where].items() if value == side]

    past, inside = listed("transfer", "above"), listed("template", "above")
    who = f"{len(past)} ({_named(past)})" if past else "none"
    text = (f"Of the {len(found)} variants, {who} gained past the template with a 95% interval above 0 on every "
            f"seed, against {len(inside)} in the template")
    lost = [f"{SHORT_NAMES.get(name, name)} lost in the template" for name in listed("template", "below")]
    lost += [f"{SHORT_NAMES.get(name, name)} lost past it" for name in listed("transfer", "below")]
    return text + (f"; {', '.join(lost)} (interval below 0)." if lost else ".")


# The base model's transfer score as each study measured it: its own draw of the split (a data seed per study) and
# its own dtype, so a reader who meets three base figures on three pages reads here whether they disagree
BASE_SCORES = (("this page", "transfer/transfer_heldout.json"),
               ("Getting started's quickstart table", "quickstart/quickstart_transfer_heldout.json"),
               ("the method study", "method_matrix/transfer/base/arithmetic.json"))


def base_across_studies() -> str:
    """The base model's transfer accuracy in each study's result file, and whether the widest gap between them is
    beyond what chance moves at their n (the lab book's two-proportion test)."""
    from bench.claims._common import load, pct
    from bench.labbook.chance import beyond_chance, needed_gap

    scores = []
    for where, name in BASE_SCORES:
        data = load(name)
        if "heldout" in data:  # the method study's job file: its own dtype in its machine record
            split, dtype = data["heldout"]["transfer"], data["machine"]["dtype"]
            accuracy, n = split["accuracy"], split["n"]
        else:
            budget = str(data["transfer_split"]["scored_budget"])
            accuracy, dtype = data["base"]["transfer"]["accuracy"][budget], data["quickstart"]["dtype"]
            n = sum(data["transfer_split"]["groups"].values())
        scores.append((where, accuracy, n, dtype))
    low, high = min(scores, key=lambda item: item[1]), max(scores, key=lambda item: item[1])
    n = min(low[2], high[2])
    verdict = ("beyond" if beyond_chance(low[1], high[1], n) else "within")
    listed = "; ".join(f"{where} {pct(accuracy)} (n = {count}, {dtype})" for where, accuracy, count, dtype in scores)
    return (f"The base model's score past the template differs from page to page: each study's transfer split leaves "
            f"out the questions its own runs trained on, so each is its own draw (and each ran in its own dtype): "
            f"{listed}. The widest gap, {100 * (high[1] - low[1]):.1f} "
            f"points, is {verdict} what chance moves at n = {n} ({100 * needed_gap(low[1], high[1], n):.1f} points "
            f"needed): each run's gain is read against the base on its own split, never across pages")


CLAIMS = {"transfer-meaning-intervals": gains_beyond_zero, "transfer-base-across-studies": base_across_studies}

PAGE = StudyPage(
    slug="transfer",
    order=30,
    title="Does what ES learns transfer past its template?",
    short="what the quickstart learns past its training template, and what a skeptic would try to make it carry",
    folder="transfer/",
    asked="""The quickstart's held-out questions are asked in its training template ("What is a + b? Reply
with only the number."), so their score measures the template as much as the skill. How much does the same trained
model gain when asked in ways no run trains on (the [transfer split](../glossary.md#evaluation): other wordings,
subtraction, 3-digit sums; [Getting started](../getting-started.md#quickstart) has both scores of the quickstart's
three seeds)? And what would a skeptic try first to make ES carry past the template, at one CPU-second budget, with
GRPO on a LoRA beside them?""",
    setup="""Every variant is the quickstart with one change (`bench/transfer/experiments.sh`; its README says why
each), trained with `training_clock: cpu` for the same CPU seconds, seed after seed, then scored in one call of
`bench/quickstart/measure.py` on the same fresh held-out questions in the template (48 new tokens) and the same
transfer split (192 new tokens, the budget at which no phrasing's answers are cut: [Tasks](../tasks.md#evaluate)).
Nothing was tuned on the transfer split. A variant is called separated from the quickstart past the template where
the difference of their pooled transfer accuracies has a 95% interval (normal approximation over the questions) that
leaves out 0.""",
    files=("transfer/transfer_heldout.json", "transfer/transfer_grpo_heldout.json"),  # BASE_SCORES: read, not run
    results="<!-- claim:transfer-experiments-table --><!-- /claim -->\n\nEach run's gain in the template against its "
            "gain past it (`bench/results/transfer/transfer_gains.png`):\n\n![Each variant's gain on the template's "
            "held-out questions against its gain on the transfer split, one point per seed]"
            "(plots/transfer/transfer_gains.png)",
    meaning=("transfer-answer", "transfer-meaning-intervals", "transfer-base-across-studies"),
    rerun="""`BUDGET=620 bash bench/transfer/experiments.sh` (BUDGET: the quickstart's CPU seconds on the
machine at hand) trains what is missing under `runs/transfer_study/` and writes
`bench/results/transfer/transfer_heldout.json` and `transfer_grpo_heldout.json`; `python -m bench.transfer.plot`
draws the plot; `python -m bench.labbook.render` renders this page from them.""",
)
