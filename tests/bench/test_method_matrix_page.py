"""bench/method_matrix's pages: the tables, the answer paragraph, the papers' claims and the plots are rendered
from the result files alone, name their rows and seeds, and leave out what has not run or was read at another
budget."""

from __future__ import annotations

import json
import statistics

import pytest

from bench.method_matrix import page, rows, spread
from bench.method_matrix.measure import SCORED_BUDGET

N = 200


def correct_string(hits: int) -> str:
    return "1" * hits + "0" * (N - hits)


def write_run(results, task: str, method: str, seed: int, hits: int, kl: float, steps: int = 10,
              peak: float = 3000.0, validation: tuple[float, float] = (0.2, 0.3), correct: str | None = None) -> None:
    """correct: which questions the run got right (default: the first `hits`)."""
    path = results / "main" / task / method / f"seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    correct = correct_string(hits) if correct is None else correct
    heldout = {"n": N, "scored_budget": SCORED_BUDGET, "accuracy": hits / N, "correct": correct,
               "accuracy_by_budget": {"64": hits / N, str(SCORED_BUDGET): hits / N},
               "ended_by_budget": {"64": 0.9, str(SCORED_BUDGET): 1.0},
               "retention": {"retain/conciseness/kl": kl, "retain/ifeval/kl": 3 * kl,
                             "retain/ifeval/prompt_strict": 0.5}}
    path.write_text(json.dumps({"training": {"steps": steps, "peak_rss_mib": peak, "training_seconds": 600.0,
                                             "reward_curve": [[60.0, 0.2], [600.0, 0.5]],
                                             "validation_before": validation[0], "validation_after": validation[1],
                                             "keys": {"num_eval": 64}},
                                "heldout": heldout, "machine": {"cpu": "Test CPU", "threads": 1, "torch": "2.13.0",
                                                                "evotune_commit": "abcdef0123"}}))


@pytest.fixture
def study(tmp_path):
    """Base 20%; full-es 3 seeds around 30%, lora-es 1 seed, grpo-lora 2 seeds around 60%."""
    base = tmp_path / "base" / "arithmetic.json"
    base.parent.mkdir(parents=True)
    base.write_text(json.dumps({"heldout": {"n": N, "scored_budget": SCORED_BUDGET, "accuracy": 0.2,
                                            "correct": correct_string(40), "accuracy_by_budget": {}}}))
    for seed, hits in enumerate([56, 60, 64]):
        write_run(tmp_path, "arithmetic", "full_es", seed, hits, kl=0.04, steps=3, peak=3100.0)
    write_run(tmp_path, "arithmetic", "es_lora", 0, 46, kl=0.001, steps=4, peak=2500.0)
    for seed, hits in enumerate([118, 122]):
        write_run(tmp_path, "arithmetic", "grpo_lora", seed, hits, kl=0.01, steps=8, peak=16000.0)
    return tmp_path


def test_wilson_interval_and_paired_gain():
    low, high = rows.wilson(0, 10)
    assert low == pytest.approx(0.0, abs=1e-9) and high == pytest.approx(27.75, abs=0.01)  # the textbook value
    low, high = rows.wilson(50, 100)
    assert (low, high) == pytest.approx((40.38, 59.62), abs=0.01)
    assert rows.paired_gain("1100", "1100") == (0.0, 0.0, 0.0)
    mean, low, high = rows.paired_gain("1111", "0011")  # differences 1, 1, 0, 0: mean 0.5, sd 0.5
    assert mean == 50.0 and (low, high) == pytest.approx((50 - 196 * 0.25, 50 + 196 * 0.25))


def test_the_task_table_quotes_every_arm_from_its_files(study):
    table = page.task_table("arithmetic", study)
    accuracies = [28.0, 30.0, 32.0]
    assert (f"| full-es | 3 of 5 | {statistics.mean(accuracies):.1f}% (std {statistics.stdev(accuracies):.1f}) | "
            "0: 28.0% [22.2, 34.6]; 1: 30.0%") in table
    assert "| lora-es | 1 of 5 | 23.0% | 0: 23.0%" in table  # one seed: no std
    assert "| 0: +8.0 [" in table.split("| full-es |")[1]  # 56 vs 40 of 200 correct: +8.0 points over the base
    assert "| 3 | 3,100 MiB | 0.040 / 0.120 | 50.0% |" in table
    assert "| base model (the start) | | 20.0% | n = 200 |" in table
    for label in ("lowrank-es", "essa (SFT + ES)", "grpo-full"):
        assert f"| {label} | 0 of 5 | not run yet |" in table


def test_the_answer_names_its_rows_and_seeds(study):
    text = page.answer(study)
    assert ("- **Learns most, 2-digit addition**: grpo-lora 60.0% (std 1.4), 2 of 5 seeds, ahead of full-es 30.0% "
            "(std 2.0), 3 of 5 seeds.") in text
    assert ("- **Keeps the base best** (lowest KL to the start on other tasks' prompts, 2-digit addition): lora-es "
            f"(0.0020), {page.NOT_SEPARATED_KL} grpo-lora (0.0200) and full-es (0.0800); moves it most: full-es "
            "(0.080).") in text  # lora-es has one seed
    assert ("- **Least memory**: lora-es (2,500 MiB peak RSS of the timed runs; the memory probes have not run "
            "yet); most: grpo-lora (16,000 MiB).") in text
    assert ("- **full-es or lora-es, on a CPU** (2-digit addition): full-es 30.0% (std 2.0), 3 of 5 seeds, not "
            "yet separated (one seed, a gap within the seed spread, or a paired difference whose 95% interval holds 0) "
            "from lora-es 23.0%, 1 of 5 seeds; KL to "
            "the start 0.080 (full-es) and 0.002 (lora-es).") in text
    assert "- **Learns most, Countdown (3 numbers, from the SFT warm start)**: fewer than two methods" in text


def test_an_arm_whose_seeds_overlap_is_not_called_ahead(study):
    write_run(study, "arithmetic", "lowrank", 0, 121, kl=0.005)  # one seed beside GRPO's 60%
    assert page.NOT_SEPARATED in page.answer(study)


def test_two_seeds_that_agree_by_luck_do_not_rank_arms_within_the_held_out_sets_noise(study):
    """Two arms 3 points apart whose two seeds each agree closely (std 0.0 and 0.4: the gap is beyond the seed
    spread), but whose answers differ question by question on 25% of the questions: the paired difference's
    interval holds 0, so neither is called ahead. The same gap with agreeing answers is a ranking."""
    def write(method, seed, correct):
        write_run(study, "countdown", method, seed, correct.count("1"), kl=0.01, correct=correct)

    essa = "1" * 30 + "0" * (N - 30)  # questions 0-29 right
    noisy = "1" * 6 + "0" * 24 + "1" * 18 + "0" * (N - 48)  # 6 of ESSA's and 18 others: 42 of 200 answers differ
    write("essa", 0, essa)
    write("essa", 1, essa)
    write("lowrank", 0, noisy)
    write("lowrank", 1, "1" * 6 + "0" * 24 + "1" * 17 + "0" * (N - 47))
    found = {item.method: item for item in page.finished_arms("countdown", study)}
    assert found["essa"].mean - found["lowrank"].mean > max(found["essa"].std, found["lowrank"].std)
    assert not page.separated(found["essa"], found["lowrank"])
    assert page.NOT_SEPARATED in page.answer(study)
    write("lowrank", 0, "1" * 24 + "0" * (N - 24))  # the same 6-7 questions fewer, every other answer agreeing
    write("lowrank", 1, "1" * 23 + "0" * (N - 23))
    found = {item.method: item for item in page.finished_arms("countdown", study)}
    assert page.separated(found["essa"], found["lowrank"])


def test_the_papers_table_says_where_each_claim_held(study):
    table = page.papers_table(study)
    assert ("| ES beats GRPO at equal compute (ES at Scale), 2-digit addition | best ES alone full-es 30.0% (std 2.0), "
            "3 of 5 seeds; best GRPO grpo-lora 60.0% (std 1.4), 2 of 5 seeds | did not hold |") in table
    # a seed spread is compared only between arms that move the same weights, once every planned seed is in
    assert "steadiest" not in table
    assert ("| ES varies less from seed to seed (ES at Scale), 2-digit addition, the same adapter | lora-es, "
            "1 of 5 seeds; grpo-lora std 1.4, 2 of 5 seeds | not every seed in yet |") in table
    assert "every weight" not in table  # grpo-full has not run
    for seed, hits in zip(range(1, 5), [46, 47, 46, 45]):
        write_run(study, "arithmetic", "es_lora", seed, hits, kl=0.001)
    for seed, hits in zip(range(2, 5), [100, 140, 110]):
        write_run(study, "arithmetic", "grpo_lora", seed, hits, kl=0.01)
    row = [line for line in page.papers_table(study).splitlines() if "the same adapter" in line][0]
    # std 0.4 against 7.4 points: a ratio an F test does not leave to chance
    assert row.endswith("| held |") and "variance ratio" in row
    for seed, hits in zip(range(1, 5), [40, 52, 44, 50]):  # lora-es: std 2.4 points
        write_run(study, "arithmetic", "es_lora", seed, hits, kl=0.001)
    for seed, hits in zip(range(5), [112, 120, 127, 110, 118]):  # grpo-lora: std 3.4 points
        write_run(study, "arithmetic", "grpo_lora", seed, hits, kl=0.01)
    found = {item.method: item for item in page.finished_arms("arithmetic", study)}
    assert found["es_lora"].std < found["grpo_lora"].std
    ratio, p_less, p_more = spread.spread_test(found["es_lora"], found["grpo_lora"])
    assert ratio > 1 and p_less > spread.SPREAD_LEVEL and p_more > 0.5
    row = [line for line in page.papers_table(study).splitlines() if "the same adapter" in line][0]
    assert row.endswith("| not separated |")  # a lower std over 5 seeds, but not by more than chance gives
    for seed, hits in zip(range(5), [20, 70, 30, 60, 45]):  # lora-es: std 10.0 points
        write_run(study, "arithmetic", "es_lora", seed, hits, kl=0.001)
    row = [line for line in page.papers_table(study).splitlines() if "the same adapter" in line][0]
    assert row.endswith("| did not hold |")
    assert "EGGROLL" not in table  # lowrank-es has not run


def test_runs_read_at_another_budget_stay_out_of_every_page(study):
    path = study / "main" / "arithmetic" / "grpo_lora" / "seed1.json"
    data = json.loads(path.read_text())
    data["heldout"]["scored_budget"] = 48
    path.write_text(json.dumps(data))
    assert "| grpo-lora | 1 of 5 | 59.0% |" in page.task_table("arithmetic", study)
    assert "| grpo-lora | 59.0%, 1 of 5 seeds |" in page.readme_table(study)


def test_the_plots_draw_every_run(study):
    from bench.method_matrix import plots

    written = plots.write_plots(study)
    assert [path.name for path in written] == ["accuracy.png", "accuracy_kl.png", "training_reward.png"]
    assert all(path.stat().st_size > 10_000 for path in written)


def test_the_lowest_kl_is_called_best_only_when_seeds_separate_it(study):
    """One seed of lora-es leaves it tied with every arm; with seeds whose KL stays below GRPO's on every seed
    it is ahead; with per-seed KLs that cross GRPO's, neither is called best."""
    for seed in (1, 2):
        write_run(study, "arithmetic", "es_lora", seed, 46, kl=0.001 + 0.0002 * seed)
    assert "lora-es (0.0024), ahead of grpo-lora (0.0200)" in page.answer(study)
    for seed, kl in ((0, 0.001), (1, 0.03), (2, 0.001)):  # above GRPO's on seed 1, its mean too
        write_run(study, "arithmetic", "es_lora", seed, 46, kl=kl)
    found = {item.method: item for item in page.finished_arms("arithmetic", study)}
    assert not page._kl_separated(found["es_lora"], found["grpo_lora"])
    assert f"grpo-lora (0.0200), {page.NOT_SEPARATED_KL} lora-es (0.0213)" in page.answer(study)


def test_recommendations_name_their_rows_and_stay_provisional_until_every_seed_is_in(study):
    text = page.recommendations(study)
    assert "- *Provisional*: 6 of the 35 runs on 2-digit addition are in;" in text
    assert "- **Most accuracy for the CPU time**: grpo-lora 60.0% (std 1.4), 2 of 5 seeds, ahead of" in text
    assert ("- **Keep the base model's behaviour elsewhere** (lowest KL to the start): lora-es (0.0020), "
            f"{page.NOT_SEPARATED_KL} grpo-lora (0.0200) and full-es (0.0800) (2-digit addition rows).") in text
    assert "- **No room for a backward pass (no gradients at all)**: full-es 30.0% (std 2.0), 3 of 5 seeds, not yet " \
           "separated" \
           in text  # lora-es has one seed
    assert "Least memory" not in text and "Countdown" not in text  # neither has rows yet


def test_essa_is_not_recommended_as_gradient_free(study):
    """ESSA evolves an SFT adapter: the line for a machine with no room for a backward pass names it beside the
    gradient-free arms, never as their best, however high it scores."""
    for seed in range(2):
        write_run(study, "arithmetic", "essa", seed, 150 + seed, kl=0.05)
    line = [line for line in page.recommendations(study).splitlines() if "No room for a backward pass" in line][0]
    assert line.startswith("- **No room for a backward pass (no gradients at all)**: full-es 30.0%")
    assert ("; ESSA, which starts from an SFT adapter (a backward pass, or an adapter you already have), reached "
            "75.2% (std 0.4), 2 of 5 seeds (2-digit addition rows).") in line


def test_essas_memory_counts_the_sft_it_is_charged_for(study):
    """ESSA on 2-digit addition runs after an SFT whose time it is charged; its peak memory is the SFT's where
    that was higher than the CMA-ES run's."""
    write_run(study, "arithmetic", "essa", 0, 100, kl=0.02, peak=1300.0)
    path = study / "main" / "arithmetic" / "essa" / "seed0.json"
    data = json.loads(path.read_text())
    data["training"]["sft_seconds_charged"] = 110.0
    path.write_text(json.dumps(data))
    sft = study / "warm_start" / "arithmetic" / "sft_seed0.json"
    sft.parent.mkdir(parents=True)
    sft.write_text(json.dumps({"training": {"peak_rss_mib": 2600.0, "training_seconds": 110.0}}))
    assert "| 10 | 2,600 MiB |" in page.task_table("arithmetic", study).split("| essa (SFT + ES) |")[1]
    assert "Least memory**: lora-es (2,500 MiB" in page.answer(study)  # not ESSA at 1,300: its SFT took 2,600


def test_a_warm_start_task_shows_its_sft_start_and_measures_gains_from_it(study):
    """Countdown's runs start from each seed's SFT model: the table's start row is that model's accuracy per seed,
    and a run's gain is over its own seed's SFT on the same questions, not over the base model."""
    for seed, hits in [(0, 80), (1, 90)]:  # as job.py writes a warm start: its held-out record at the top
        path = study / "warm_start" / "countdown" / f"sft_seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"steps": 38, "peak_rss_mib": 2000.0},
                                    "heldout": {"n": N, "scored_budget": SCORED_BUDGET, "accuracy": hits / N,
                                                "correct": correct_string(hits),
                                                "retention": {"retain/ifeval/prompt_strict": 0.25}}}))
    write_run(study, "countdown", "full_es", 1, 100, kl=0.02)
    table = page.task_table("countdown", study)
    assert "| SFT warm start (the start) | 2 of 3 | 42.5% (std 3.5) | 0: 40.0% [33.5, 46.9]; 1: 45.0% [38.3, 51.9]" \
        in table and "base model" not in table
    # seed 1: 100 right against its SFT's 90 (the first 90 of the same questions): +5.0 points
    assert "| full-es | 1 of 3 | 50.0% |" in table and "1: +5.0 [" in table
    assert [row for row in table.splitlines() if row.startswith("| lora-es")] == [
        "| lora-es | 0 of 3 | not run yet | | | | | | |"]


def test_an_arm_whose_answers_the_budget_cuts_is_flagged_in_the_table(study):
    """An accuracy read where most answers had not ended says "no answer within the budget": the table says so next
    to the number, and only for that arm."""
    path = study / "main" / "arithmetic" / "es_lora" / "seed0.json"
    record = json.loads(path.read_text())
    record["heldout"]["ended_by_budget"][str(SCORED_BUDGET)] = 0.43
    path.write_text(json.dumps(record))
    lines = [line for line in page.task_table("arithmetic", study).splitlines() if line.startswith("| ")]
    flagged = [line.split(" | ")[0] for line in lines if "answers cut" in line]
    assert flagged == ["| lora-es"], flagged
    assert f"(answers cut: 43% ended within {SCORED_BUDGET} tokens; scored the same from 64 to {SCORED_BUDGET})" \
        in next(line for line in lines if "lora-es" in line)


@pytest.mark.parametrize(("at_64", "reading"), [
    (0.15, ", and its score still rose from 64 to {scored}: a floor)"),
    (0.23, "; scored the same from 64 to {scored})"),
    (0.30, "; its score rose no further after 64 tokens: 30.0% there, 23.0% at {scored})")])
def test_the_cut_flag_says_what_the_smaller_budgets_show(study, at_64, reading):
    """A score read where most answers had not ended is a floor only while it still rises at the scored budget: a
    score that stopped rising at a smaller budget (or fell, as answers that ran on changed their last number) is
    said to have done so, with its figures."""
    path = study / "main" / "arithmetic" / "es_lora" / "seed0.json"
    record = json.loads(path.read_text())
    record["heldout"]["ended_by_budget"][str(SCORED_BUDGET)] = 0.43
    record["heldout"]["accuracy_by_budget"] = {"64": at_64, str(SCORED_BUDGET): 0.23}
    path.write_text(json.dumps(record))
    found = next(item for item in page.arms(study, "arithmetic") if item.label == "lora-es")
    assert page.cut_text(found) == (f" (answers cut: 43% ended within {SCORED_BUDGET} tokens"
                                    + reading.format(scored=SCORED_BUDGET))


def test_the_validation_line_shows_an_arm_that_fell_during_training_per_seed(study):
    """An arm whose own validation score fell while it trained is visible per seed, beside the arms that rose."""
    assert page.validation_text("countdown", study) == "no run has finished yet"
    write_run(study, "countdown", "full_es", 0, 30, kl=0.03, validation=(0.078125, 0.125))
    write_run(study, "countdown", "grpo_lora", 0, 0, kl=0.09, validation=(0.078125, 0.0))
    write_run(study, "countdown", "grpo_lora", 1, 0, kl=0.09, validation=(0.0625, 0.015625))
    assert page.validation_text("countdown", study) == (
        "full-es 7.8% -> 12.5% (seed 0); grpo-lora 7.8% -> 0.0% (seed 0), 6.2% -> 1.6% (seed 1) "
        "(64 validation questions per run)")


def write_probe(results, method: str, variant: str, peak: float, cpu: str = "Test CPU") -> None:
    """A memory probe's result file as job.py writes it: its peak RSS, the weight copies the method holds, and the
    CPU it ran on (the timed runs' "Test CPU" unless told)."""
    from bench.method_matrix.arms import METHODS, memory_keys
    from bench.method_matrix.job import weight_copies

    keys = memory_keys(method, METHODS[method]["grid"][0], variant)
    path = results / "memory" / f"{method}_{variant}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"memory": {"keys": keys, "variant": variant, "peak_rss_mib": peak, "seconds": 60.0,
                                           "weights": weight_copies(method, keys)},
                                "machine": {"cpu": cpu, "threads": 1, "torch": "2.13.0",
                                            "evotune_commit": "abcdef0123"}}))


PROBES = {("full_es", "default"): 2400.0, ("full_es", "no_drift"): 1900.0, ("es_lora", "default"): 1400.0,
          ("lowrank", "default"): 2900.0, ("mezo", "default"): 2300.0, ("essa", "default"): 1500.0,
          ("grpo_lora", "default"): 15000.0,
          ("grpo_lora", "accumulation4"): 5000.0, ("grpo_full", "default"): 17000.0,
          ("grpo_full", "accumulation4"): 7000.0}


def test_every_memory_probe_is_a_row_naming_the_copies_of_the_weights_and_the_answer_reads_them(study):
    from bench.method_matrix.arms import TUNING_SEED

    for (method, variant), peak in PROBES.items():
        write_probe(study, method, variant, peak)
    sft = study / "warm_start" / "arithmetic" / f"sft_seed{TUNING_SEED}.json"  # ESSA's probe starts from it
    sft.parent.mkdir(parents=True)
    sft.write_text(json.dumps({"training": {"peak_rss_mib": 2600.0, "training_seconds": 110.0},
                               "machine": {"cpu": "Test CPU", "threads": 1, "torch": "2.13.0",
                                           "evotune_commit": "abcdef0123"}}))
    table = page.memory_table(study)
    assert "The probes ran on Test CPU at 1 thread (torch 2.13.0), the timed runs' machine type." \
        in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(PROBES) and "not run yet" not in table
    assert ("| full-es | as a user runs it | 2,400 MiB | model weights 513 MiB, fp32 master of the mean 513 MiB, fp32 "
            "drift base 513 MiB |") in rows
    assert ("| full-es | `log_drift: false`, as the timed runs | 1,900 MiB | model weights 513 MiB, fp32 master of the "
            "mean 513 MiB |") in rows
    assert ("| grpo-full | `gradient_accumulation_steps: 4` | 7,000 MiB | model weights 513 MiB, gradients "
            "513 MiB, adamw moments 1,026 MiB |") in rows
    essa = ("| essa (SFT + ES) | as a user runs it | 2,600 MiB | model weights 513 MiB (its SFT first: 2,600 MiB "
            "peak RSS; the evolution alone, from an adapter you have: 1,500 MiB) |")
    assert essa in rows
    assert ("- **Least memory**: lora-es (1,400 MiB peak RSS in its memory probe); most: grpo-full "
            "(17,000 MiB; 7,000 MiB with `gradient_accumulation_steps: 4`).") in page.answer(study)
    assert ("- **Least memory**: lora-es (1,400 MiB peak RSS in its memory probe); most: grpo-full "
            "(17,000 MiB; 7,000 MiB with `gradient_accumulation_steps: 4`) (memory probe rows).") \
        in page.recommendations(study)
    assert ("| ES needs only inference memory (ES at Scale) | full-es 2,400 MiB (with its drift copy); "
            "grpo-full 17,000 MiB (as a user runs it), 7,000 MiB (`gradient_accumulation_steps: 4`) (memory "
            "probes) | held |") in page.papers_table(study)
    write_probe(study, "grpo_full", "accumulation4", 2300.0)  # sliced, GRPO's loss fits under full-es
    assert ("grpo-full 17,000 MiB (as a user runs it), 2,300 MiB (`gradient_accumulation_steps: 4`) (memory "
            "probes) | did not hold |") in page.papers_table(study)


def test_a_partial_set_of_memory_probes_says_how_many_are_in(study):
    """A study stopped midway through its probes: no least or most is called over the methods that happen to be in
    without saying so, and the probes that have not run keep their rows."""
    write_probe(study, "full_es", "default", 2400.0)
    write_probe(study, "grpo_full", "default", 17000.0)
    assert ("- **Least memory**: full-es (2,400 MiB peak RSS in its memory probe); most: grpo-full (17,000 "
            "MiB) (2 of the 7 methods' memory probes have run: least and most so far).") in page.answer(study)
    table = page.memory_table(study)
    assert sum("| not run yet |" in line for line in table.splitlines()) == len(PROBES) - 2
    assert "| lora-es | as a user runs it | not run yet | |" in table
    assert "(memory probes) | not every probe in yet |" in page.papers_table(study)


def test_an_arm_whose_answers_the_budget_cuts_is_flagged_wherever_it_is_named_and_never_ranked(study):
    """grpo-lora leads full-es by 30 points over seeds that separate them; once most of its answers had not
    ended within the scored budget, its number may hide answers past the budget: each sentence and the README's
    table that name it carry the flag, no ranking or paper's verdict rests on it, and arms not cut rank as before."""
    assert "grpo-lora 60.0% (std 1.4), 2 of 5 seeds, ahead of full-es" in page.answer(study)
    write_run(study, "arithmetic", "es_lora", 1, 47, kl=0.001)
    for seed in range(2):
        path = study / "main" / "arithmetic" / "grpo_lora" / f"seed{seed}.json"
        record = json.loads(path.read_text())
        record["heldout"]["ended_by_budget"][str(SCORED_BUDGET)] = 0.4
        path.write_text(json.dumps(record))
    flag = f" (answers cut: 40% ended within {SCORED_BUDGET} tokens; scored the same from 64 to {SCORED_BUDGET})"
    assert (f"- **Learns most, 2-digit addition**: grpo-lora 60.0% (std 1.4), 2 of 5 seeds{flag}, "
            f"{page.CUT_NOT_RANKED} full-es 30.0% (std 2.0), 3 of 5 seeds.") in page.answer(study)
    assert f"| grpo-lora | 60.0% (std 1.4), 2 of 5 seeds{flag} |" in page.readme_table(study)
    assert "| full-es | 30.0% (std 2.0), 3 of 5 seeds |" in page.readme_table(study)
    papers = page.papers_table(study)
    assert f"best GRPO grpo-lora 60.0% (std 1.4), 2 of 5 seeds{flag} | open: the scored budget cut answers |" \
        in papers
    assert "| held |" not in papers and "did not hold" not in papers
    for seed, hits in zip(range(2, 5), [46, 47, 46]):  # every planned seed in: the spread row is open too
        write_run(study, "arithmetic", "es_lora", seed, hits, kl=0.001)
    for seed, hits in zip(range(2, 5), [100, 140, 110]):
        write_run(study, "arithmetic", "grpo_lora", seed, hits, kl=0.01)
        path = study / "main" / "arithmetic" / "grpo_lora" / f"seed{seed}.json"
        record = json.loads(path.read_text())
        record["heldout"]["ended_by_budget"][str(SCORED_BUDGET)] = 0.4
        path.write_text(json.dumps(record))
    row = [line for line in page.papers_table(study).splitlines() if "the same adapter" in line][0]
    assert row.endswith("| open: the scored budget cut answers |"), row  # "held" were GRPO's answers whole
    # full-es against lora-es (neither cut) ranks as ever: 7 points apart over the 3 seeds both ran
    assert "full-es 30.0% (std 2.0), 3 of 5 seeds, ahead of lora-es 23.2% (std 0.3), 5 of 5 seeds" \
        in page.answer(study)


def test_memory_probes_on_another_machine_type_name_it_and_the_job_run_on_both(study):
    """The probes alone may run on another CPU than the timed runs (run.py): every sentence quoting them names that
    CPU, the study's setup line keeps the timed runs' CPU alone, ESSA's row takes its SFT's peak from the probes'
    own CPU (the restore made it there), and the SFT's peak on both machines is set side by side."""
    from bench.method_matrix.arms import TUNING_SEED

    for (method, variant), peak in PROBES.items():
        write_probe(study, method, variant, peak, cpu="Probe CPU")
    machine = {"threads": 1, "torch": "2.13.0", "evotune_commit": "abcdef0123"}
    sft = study / "warm_start" / "arithmetic" / f"sft_seed{TUNING_SEED}.json"
    sft.parent.mkdir(parents=True)
    sft.write_text(json.dumps({"training": {"peak_rss_mib": 2600.0}, "machine": {"cpu": "Test CPU", **machine}}))
    table = page.memory_table(study)
    assert "The probes ran on Probe CPU at 1 thread (torch 2.13.0), not the timed runs' Test CPU" \
        in table
    assert "(the SFT that ESSA's probe starts from) has not run on both yet." in table
    # no SFT peak from Test CPU
    assert "| essa (SFT + ES) | as a user runs it | 1,500 MiB | model weights 513 MiB |" in table
    restored = study / "restored" / "warm_start" / "arithmetic" / f"sft_seed{TUNING_SEED}.json"
    restored.parent.mkdir(parents=True)
    restored.write_text(json.dumps({"restored": {"training": {"peak_rss_mib": 2250.0}},
                                    "machine": {"cpu": "Probe CPU", **machine}}))
    table = page.memory_table(study)
    assert ("The one job run on both, the arithmetic SFT that ESSA's probe starts from, peaked at 2,600 MiB on Test "
            "CPU and 2,250 MiB on Probe CPU.") in table
    assert ("| essa (SFT + ES) | as a user runs it | 2,250 MiB | model weights 513 MiB (its SFT first: 2,250 MiB "
            "peak RSS; the evolution alone, from an adapter you have: 1,500 MiB) |") in table
    assert "(1,400 MiB peak RSS in its memory probe on Probe CPU); most: grpo-full" in page.answer(study)
    assert "(memory probes on Probe CPU) | held |" in page.papers_table(study)
    assert "on Test CPU (torch" in page.setup(study) and "Probe CPU" not in page.setup(study)


def edit_result(path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_step_matched_run_is_marked_where_its_seed_is_shown_and_named_apart_in_the_setup(study):
    """A run that took its arm's median steps on another machine type (run.py --step-matched) carries the mark in
    the per-seed column, the table's note says what it matched and that no time is compared on it, and the setup
    line keeps naming the timed runs' CPU alone, with the step-matched runs listed after it."""
    for seed, hits in enumerate([30, 32, 34]):
        write_run(study, "countdown", "essa", seed, hits, kl=0.01, steps=3)

    def matched(data):
        data["training"]["step_matched"] = {"steps": 3, "median_of": [3, 3], "files": [
            "main/countdown/essa/seed0.json", "main/countdown/essa/seed1.json"]}
        data["machine"]["cpu"] = "Other CPU"

    edit_result(study / "main" / "countdown" / "essa" / "seed2.json", matched)
    table = page.task_table("countdown", study)
    assert "0: 15.0%" in table and "2†: 17.0% [" in table and "1†" not in table
    assert ("† step-matched on Other CPU: the run took the median steps of its arm's seeds on the study's Test CPU "
            "(equal work) instead of their equal time (essa (SFT + ES) seed 2: 3 steps, the median of 3, 3). Its "
            "accuracy at equal steps does not hang on the CPU; its seconds do, so none is quoted or compared.") in table
    setup = page.setup(study)
    assert "on Test CPU (torch" in setup and "Other CPU" not in setup.split(";")[0]
    assert "1 runs instead took the median steps of their arm's seeds there, on Other CPU" in setup
    assert "seed 2)" in setup
    assert "†" not in page.task_table("arithmetic", study)  # no run there is step-matched: no note


def test_the_sft_alone_row_and_what_essas_evolution_adds_to_it(study):
    """On 2-digit addition only ESSA starts from an SFT: that SFT, measured alone as an arm is, gets its row (with
    the CPU it was made again and measured on), and the papers' table says whether the evolution added to it,
    from the paired gain over the seeds both ran."""
    assert "| SFT alone (ESSA's start) | 0 of 5 | not run yet |" in page.task_table("arithmetic", study)
    for seed in (0, 1):
        trained = study / "warm_start" / "arithmetic" / f"sft_seed{seed}.json"
        trained.parent.mkdir(parents=True, exist_ok=True)
        trained.write_text(json.dumps({"training": {"steps": 38, "peak_rss_mib": 2200.0, "training_seconds": 300.0}}))
        write_run(study, "sft_alone_source", "essa", seed, 80, kl=0.02)  # a held-out record to move into place
        measured = study / "sft_alone" / "arithmetic" / f"seed{seed}.json"
        measured.parent.mkdir(parents=True, exist_ok=True)
        source = json.loads((study / "main" / "sft_alone_source" / "essa" / f"seed{seed}.json").read_text())
        measured.write_text(json.dumps({"heldout": source["heldout"], "machine": {**source["machine"],
                                                                                "cpu": "Other CPU"}}))
        write_run(study, "arithmetic", "essa", seed, 100, kl=0.03)  # the SFT's 80 questions and 20 more
    table = page.task_table("arithmetic", study)
    assert ("| SFT alone (ESSA's start), made again and measured on Other CPU | 2 of 5 | 40.0% (std 0.0) | "
            "0: 40.0% [") in table
    assert "| 0: +20.0 [" in table.split("| SFT alone")[1]  # 80 against the base's 40 of 200
    assert "| 38 SFT steps | 2,200 MiB | 0.020 / 0.060 | 50.0% |" in table
    papers = page.papers_table(study)
    assert ("| ESSA's evolution adds to its SFT warm start (ESSA), 2-digit addition | essa (SFT + ES) 50.0% (std 0.0), "
            "2 of 5 seeds; its SFT alone 40.0%, 2 of 5 seeds; paired gain +10.0 points [") in papers
    assert papers.split("ESSA's evolution adds")[1].split("\n")[0].endswith("| held |")
    write_run(study, "arithmetic", "essa", 0, 80, kl=0.03)  # seed 0's evolution added nothing, seed 1's 20
    write_run(study, "arithmetic", "essa", 1, 80, kl=0.03)
    assert page.papers_table(study).split("ESSA's evolution adds")[1].split("\n")[0].endswith("| not separated |")


def test_the_tuning_table_gives_the_validation_noise_and_every_edge_of_the_grid(study):
    """The chosen setting's validation score with its n and 95% interval, the next best setting's score, the seconds
    per step over the settings, and every grid key (in any dimension) whose chosen value is the grid's edge."""
    from bench.method_matrix.arms import METHODS, TUNING_SEED
    from bench.method_matrix.tables import _grid_edges, tuning_table

    spec = {"keys": {"batch_size": 16, "sigma": 0.1}, "grid": [{"learning_rate": 1.0}, {"learning_rate": 2.0},
                                                               {"learning_rate": 3.0, "batch_size": 8},
                                                               {"learning_rate": 2.0, "sigma": 0.2}]}
    # a key the setting leaves out counts at the method's fixed value; a key with two values is always at an edge
    assert _grid_edges(spec, 1) == "largest batch_size (of 2), smallest sigma (of 2)"
    assert _grid_edges(spec, 2) == "smallest batch_size (of 2), largest learning_rate (of 3), smallest sigma (of 2)"
    assert _grid_edges(spec, 3) == "largest batch_size (of 2), largest sigma (of 2)"
    assert _grid_edges({"keys": {}, "grid": [{"learning_rate": value} for value in (1.0, 2.0, 4.0)]}, 1) == "none"
    assert _grid_edges({"keys": {}, "grid": [{"svd_offsets": "absolute"}, {"svd_offsets": "relative"}]}, 0) == "none"
    assert _grid_edges(spec, 0) == "largest batch_size (of 2), smallest learning_rate (of 3), smallest sigma (of 2)"
    for index, (after, steps) in enumerate([(0.25, 5), (0.30, 6), (0.20, 4), (0.10, 5)]):
        path = study / "tune" / "arithmetic" / "full_es" / f"s{index}_seed{TUNING_SEED}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"validation_before": 0.2, "validation_after": after, "steps": steps,
                                                 "training_seconds": 600.0, "sft_seconds_charged": 0.0,
                                                 "keys": {"num_eval": 256}}}))
    row = next(line for line in tuning_table(study).splitlines() if line.startswith("| full-es |"))
    assert "| 20.0% -> 30.0% [24.8, 36.0], n = 256 | 25.0% (" in row and "| 100-150 s |" in row
    assert row.endswith(f"| {_grid_edges(METHODS['full_es'], 1)} |")
    # an arm budgeted in CPU seconds: its budget over its steps, in CPU s, whatever its wall seconds were
    for index, steps in enumerate([40, 44, 41, 45]):
        path = study / "tune" / "arithmetic" / "mezo" / f"s{index}_seed{TUNING_SEED}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"validation_before": 0.2, "validation_after": 0.3 if index == 1
                                                 else 0.25, "steps": steps, "training_seconds": 3000.0,
                                                 "sft_seconds_charged": 0.0,
                                                 "keys": {"num_eval": 256, "training_clock": "cpu",
                                                          "max_training_seconds": 600.0}}}))
    row = next(line for line in tuning_table(study).splitlines() if line.startswith("| mezo |"))
    assert "| 13-15 CPU s |" in row, row


def test_the_spread_claims_f_test_is_shown_once_every_seed_is_in_even_where_answers_were_cut(study):
    """With every planned seed in, the F test's ratio and p are printed; the verdict stays open while the scored
    budget cut either arm's answers."""
    for seed, hits in enumerate([30, 31, 32]):
        write_run(study, "countdown", "full_es", seed, hits, kl=0.01)
    for seed, hits in enumerate([10, 40, 20]):
        write_run(study, "countdown", "grpo_full", seed, hits, kl=0.01)
        edit_result(study / "main" / "countdown" / "grpo_full" / f"seed{seed}.json",
                    lambda data: data["heldout"]["ended_by_budget"].update({str(SCORED_BUDGET): 0.5}))
    row = next(line for line in page.papers_table(study).splitlines() if "from seed to seed" in line
               and "Countdown" in line and "every weight" in line)
    assert "variance ratio" in row and "F test p = " in row and row.endswith("| open: the scored budget cut answers |")


def test_the_warm_start_recommendation_needs_a_gain_over_the_start(study):
    """Countdown's recommendation ranks arms only where the best uncut arm gained over its start beyond noise (the
    paired gain pooled over its seeds); otherwise it says no arm is separated from the start and names the gain."""
    for seed, hits in [(0, 80), (1, 90)]:
        path = study / "warm_start" / "countdown" / f"sft_seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"steps": 38, "peak_rss_mib": 2000.0},
                                    "heldout": {"n": N, "scored_budget": SCORED_BUDGET, "accuracy": hits / N,
                                                "correct": correct_string(hits)}}))
    for seed, hits in [(0, 81), (1, 91)]:  # one question more than each seed's start: within the noise
        write_run(study, "countdown", "full_es", seed, hits, kl=0.02)
        write_run(study, "countdown", "es_lora", seed, hits - 1, kl=0.02)
    line = next(row for row in page.recommendations(study).splitlines() if "Countdown" in row)
    assert "no arm is separated from its start: the best uncut arm, full-es 43.0% (std 3.5), 2 of 3 seeds, gained " \
           "+0.5 points over it [" in line and "nothing is recommended over the warm start alone" in line
    for seed, hits in [(0, 120), (1, 130)]:  # 40 questions more on each seed: a gain
        write_run(study, "countdown", "full_es", seed, hits, kl=0.02)
    line = next(row for row in page.recommendations(study).splitlines() if "Countdown" in row)
    assert "no arm is separated" not in line and line.startswith("- **A task that needs a warm start (Countdown)**: "
                                                                 "full-es 62.5%")
