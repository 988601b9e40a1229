"""The quickstart: what `evotune train` without a config gains on fresh questions, in its template and past it."""

from __future__ import annotations

import json

from bench.claims._common import RESULTS, load, pct
from bench.claims.learning import shipped_quickstart
from bench.labbook.chance import beyond_chance
from bench.labbook.spec import StudyPage

TEMPLATE_FILE = "quickstart/quickstart_heldout.json"  # template only, at growing budgets, with the candidates
BOTH_FILE = "quickstart/quickstart_transfer_heldout.json"  # template and transfer split
LOGGED_RUN = "quickstart/example_run/metrics.jsonl"  # one run's own training log (seed 0)
METHOD_NAMES = {"full": "full-es", "lowrank": "lowrank-es"}




def template_gain() -> str:
    """How many times the base model's template accuracy each run of both files reached, whether each run's paired
    gain interval lies above 0, and the minutes a run took: the page's "it roughly doubles accuracy in minutes"."""
    runs, ratios = [], []
    for data, chosen in ((load(BOTH_FILE), None), (load(TEMPLATE_FILE), shipped_quickstart)):
        budget = str(data["eval_max_new_tokens"])
        found = chosen(data)[0] if chosen else data["runs"]
        runs += found
        ratios += [run["accuracy"][budget] / data["base"]["accuracy"][budget] for run in found]
    above = sum(run["gain_ci95"][0] > 0 for run in runs)
    minutes = [run["wall_time_s"] / 60 for run in runs]
    threads = ", ".join(sorted({str(run["threads"]) for run in runs}))
    intervals = ("every run's 95% interval of the gain above 0" if above == len(runs)
                 else f"{above} of {len(runs)} runs' 95% intervals of the gain above 0")
    return (f"In its template the quickstart took accuracy to {min(ratios):.1f}-{max(ratios):.1f} times the base "
            f"model's over the {len(runs)} runs of both files ({intervals}), each run taking "
            f"{min(minutes):.1f} to {max(minutes):.1f} minutes on {threads} CPU cores.")


def transfer_gain() -> str:
    """The mean paired gain past the template against the mean gain in it (same runs), with the accuracies reached
    and how many seeds' transfer intervals lie above 0: whether it gains less when asked in other ways."""
    data = load(BOTH_FILE)
    runs = data["runs"]
    scored = str(data["transfer_split"]["scored_budget"])
    past = sum(run["transfer"]["gain_points"] for run in runs) / len(runs)
    inside = sum(run["gain_points"] for run in runs) / len(runs)
    reached = [run["transfer"]["accuracy"][scored] for run in runs]
    above = sum(run["transfer"]["gain_ci95"][0] > 0 for run in runs)
    relation = "fewer" if past < inside else "as many or more"
    return (f"Asked in ways it never trained on, it gained {relation} points than in its template: {past:+.1f} on "
            f"average (from {pct(data['base']['transfer']['accuracy'][scored])} to "
            f"{pct(min(reached))}-{pct(max(reached))}) against {inside:+.1f}, with {above} of {len(runs)} seeds' 95% "
            "intervals above 0.")


def group_changes() -> str:
    """Per group of the transfer split, on how many seeds the accuracy rose (or fell) from the base beyond what
    chance moves at the group's n (two-proportion test, 95%): where it carries and where, as on subtraction, not."""
    data = load(BOTH_FILE)
    base, runs = data["base"]["transfer"]["by_group"], data["runs"]
    parts = []
    for name, size in data["transfer_split"]["groups"].items():
        changes = [run["transfer"]["by_group"][name] - base[name] for run in runs]
        moved = [beyond_chance(run["transfer"]["by_group"][name], base[name], size) for run in runs]
        rose = sum(significant and change > 0 for significant, change in zip(moved, changes))
        fell = sum(significant and change < 0 for significant, change in zip(moved, changes))
        label = name + (" (an operation it never trained on)" if name == "subtraction" else "")
        text = f"{label} rose on {rose} of {len(runs)} seeds" + (f" and fell on {fell}" if fell else "")
        if not rose and not fell:
            text = f"{label} moved on none (at most {100 * max(changes, key=abs):+.1f} points)"
        parts.append(text)
    sizes = sorted(set(data["transfer_split"]["groups"].values()))
    return (f"By group (n = {'/'.join(map(str, sizes))} each), beyond what chance moves at the 95% level: "
            + "; ".join(parts) + ".")


def logged_reward() -> str:
    """In the one run whose training log is kept, how far the training reward's mean swung between iterations
    against the run's own held-out evaluation: why the page points to the held-out evaluation, not the reward."""
    lines = [json.loads(line) for line in (RESULTS / LOGGED_RUN).read_text().splitlines() if line.strip()]
    rewards = [line["reward_mean"] for line in lines if "reward_mean" in line]
    evaluations = [line["eval/accuracy"] for line in lines if "eval/accuracy" in line]
    largest_fall = max(before - after for before, after in zip(rewards, rewards[1:]))
    return (f"In the one run whose log is kept (seed 0), the training reward's mean ranged from {pct(min(rewards))} "
            f"to {pct(max(rewards))} over its {len(rewards)} iterations, falling by up to {100 * largest_fall:.1f} "
            "points from one to the next, while its own held-out evaluation went "
            + " -> ".join(pct(value) for value in evaluations)
            + ": every member of an iteration shares its few prompts, so read the held-out evaluation.")


def candidates() -> str:
    """The quickstarts measured one after the other on one machine (same questions): the one with the larger mean
    gain, whether each of its seeds' gain intervals lies above every seed's of the other, and their minutes."""
    data = load(TEMPLATE_FILE)
    groups = {}
    for run in data["runs"]:
        groups.setdefault(METHOD_NAMES.get(run["settings"]["space"], run["settings"]["space"]), []).append(run)
    if len(groups) < 2:
        return "Only one quickstart was measured side by side: nothing to compare."
    ordered = sorted(groups, key=lambda name: -sum(run["gain_points"] for run in groups[name]) / len(groups[name]))
    best, other = ordered[0], ordered[1]

    def gains(name: str) -> str:
        values = sorted(run["gain_points"] for run in groups[name])
        return f"{values[0]:+.1f}" if len(values) == 1 else f"{values[0]:+.1f} to {values[-1]:+.1f}"

    def minutes(name: str) -> str:
        values = sorted(run["wall_time_s"] / 60 for run in groups[name])
        return f"{values[0]:.1f}" if len(values) == 1 else f"{values[0]:.1f}-{values[-1]:.1f}"

    apart = min(run["gain_ci95"][0] for run in groups[best]) > max(run["gain_ci95"][1] for run in groups[other])
    faster = max(run["wall_time_s"] for run in groups[best]) < min(run["wall_time_s"] for run in groups[other])
    return (f"Measured one after the other on one machine, the {best} quickstart gained more than the {other} one "
            f"({gains(best)} points against {gains(other)}; "
            + ("every 95% interval of its seeds above the other's" if apart else "their 95% intervals overlap")
            + f") in {'less' if faster else 'no less'} time ({minutes(best)} minutes a run against "
            f"{minutes(other)}).")


def method_study() -> str:
    """The ES arms without a warm start in the matched method study on 2-digit addition, best first, with whether
    the best is separated from the next (the method study's own rule): why the quickstart runs lowrank-es."""
    from bench.method_matrix.page import ranking
    from bench.method_matrix.tables import ES_ALONE, finished_arms

    found = [arm for arm in finished_arms("arithmetic") if arm.method in ES_ALONE]
    if len(found) < 2:
        return "The matched method study has too few ES arms in to rank them."
    best = max(found, key=lambda arm: arm.mean)
    lead = ("the quickstart's lowrank-es learned most" if best.method == "lowrank"
            else f"{best.label} learned most, not the quickstart's lowrank-es")
    return (f"Of the ES methods without a warm start in the matched method study (2-digit addition, each tuned on a "
            f"validation split, equal CPU time), {lead}: {ranking(found)}.")


CLAIMS = {
    "quickstart-meaning-template": template_gain,
    "quickstart-meaning-transfer": transfer_gain,
    "quickstart-meaning-groups": group_changes,
    "quickstart-meaning-reward": logged_reward,
    "quickstart-meaning-candidates": candidates,
    "quickstart-meaning-method": method_study,
}

PAGE = StudyPage(
    slug="quickstart",
    order=20,
    title="The quickstart",
    short="what `evotune train` without a config gains on fresh questions, 3 seeds",
    folder="quickstart/",
    asked="""What `evotune train` without a config (lowrank-es at its own defaults on the built-in model)
gains on fresh questions in its training template and on the same skill asked in ways it never trained on, and what
it costs in time.""",
    setup="""`bench/quickstart/`: the shipped settings (the same as `examples/lowrank_arithmetic.yaml`), 3 seeds, each
run timed from start to its `final/` model on 2 CPU cores with the speed probe recorded before it, then the base and
each final model scored in one call on fresh held-out questions no run trained on (at 48 new tokens and at growing
budgets) and on the arithmetic task's transfer split (other wordings, subtraction, 3-digit sums, at 192 new tokens;
[Tasks](../tasks.md#evaluate)). Two files: `quickstart_transfer_heldout.json` with both scores, and
`quickstart_heldout.json` with the template only, beside the earlier full-es quickstart run one after the other on
the same machine and scored on the same questions. `dtype: auto` trains in bfloat16 on a CPU with AMX and in float32
elsewhere; each file names its machine and dtype.""",
    files=(BOTH_FILE, TEMPLATE_FILE),
    results="""Both scores, per seed:<!-- claim:quickstart-table --><!-- /claim -->

The template only, at growing budgets: <!-- claim:quickstart --><!-- /claim -->.

Beside the earlier full-es quickstart: <!-- claim:quickstart-candidates --><!-- /claim -->.""",
    meaning=("quickstart-meaning-template", "quickstart-meaning-transfer", "quickstart-meaning-groups",
             "quickstart-meaning-candidates", "quickstart-meaning-method", "quickstart-meaning-reward"),
    rerun="""`bash bench/quickstart/run.sh` (3 seeds; runs only what is missing; `NAME=quickstart_transfer` for
the file with both scores; `COMMAND=grpo` for `evotune grpo`'s quickstart) writes
`bench/results/quickstart/*_heldout.json`; `bash bench/quickstart/candidates.sh` the side-by-side file;
`python -m bench.labbook.render` renders this page from them.""",
    related="What might make it carry further past its template: [Does it transfer?](transfer.md).",
)
