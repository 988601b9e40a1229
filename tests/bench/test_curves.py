"""bench/curves: a run's model at a CPU-second mark is the one whose training had used no more than the mark, and an
ES arm's is replayed exactly from the run's update log (no weights are kept between marks)."""

from __future__ import annotations

import shutil

import pytest
import torch
from helpers import tiny_config

from bench.curves.run import keep_replay
from bench.curves.score import es_models, step_at
from evotune.trainer import Trainer


def test_the_step_at_a_mark_is_the_last_that_ended_within_it():
    steps = [{"iteration": 1, "cpu_s": 40.0}, {"iteration": 2, "cpu_s": 80.5}, {"iteration": 3, "cpu_s": 121.0}]
    assert [step_at(steps, mark) for mark in (0.0, 39.9, 40.0, 100.0, 121.0, 1e9)] == [0, 0, 1, 2, 3, 3]


def test_an_es_runs_mean_at_each_mark_is_replayed_exactly_from_its_update_log(tiny_model_dir, tmp_path):
    """The mean replayed to iteration k equals the final mean of the same run stopped after k iterations, bit for
    bit, for every k: the curves' ES models need no snapshot of the weights."""
    values = dict(space="lowrank", perturbation_rank=1, report_to=[], eval_every=0, checkpoint_every=100,
                  training_clock="cpu")
    Trainer(tiny_config(tiny_model_dir, iterations=3, **values), tmp_path / "whole").train()
    kept = tmp_path / "results" / "replay" / "lowrank_seed0"
    assert keep_replay(tmp_path / "whole", kept) == "replay/lowrank_seed0"
    shutil.rmtree(tmp_path / "whole")  # the kept config and update log are all a replay reads (no weights)
    assert sorted(path.name for path in kept.iterdir()) == ["config.yaml", "updates.json"]
    replayed = es_models(kept, [0, 1, 3])
    base = {name: tensor.clone() for name, tensor in next(replayed).model.state_dict().items()}
    for steps in (1, 3):
        stopped = Trainer(tiny_config(tiny_model_dir, iterations=steps, **values), tmp_path / f"stopped{steps}")
        stopped.train()
        backend = next(replayed)
        expected = stopped.space.state_tensors()
        model = dict(backend.model.named_parameters())
        assert all(torch.equal(model[name].detach().float(), tensor) for name, tensor in expected.items())
        assert any(not torch.equal(model[name].detach(), base[name]) for name in expected)  # it moved


def _scores(folder, arm, label, seed, template, transfer):
    """A score file as bench/curves/score.py writes it: one mark per 600 CPU seconds from 0."""
    import json

    marks = [{"mark_cpu_s": 600.0 * index, "iteration": index, "cpu_s": 600.0 * index, "wall_s": 300.0 * index,
              "template": {"accuracy": value}, "transfer": {"accuracy": other}}
             for index, (value, other) in enumerate(zip(template, transfer))]
    (folder / "scores").mkdir(parents=True, exist_ok=True)
    (folder / "scores" / f"{arm}_seed{seed}.json").write_text(json.dumps({"arm": arm, "label": label, "seed": seed,
                                                                          "marks": marks}))


def test_the_curves_page_reads_thresholds_and_the_last_slope_from_the_scores(tmp_path):
    from bench.curves.page import curves_table, last_slope, load_scores, mean_curve, sentence, time_to_reach

    rising = [0.20, 0.28, 0.33, 0.41, 0.46, 0.52, 0.58]  # +5 to +6 points every 600 CPU s to the end
    for seed, shift in enumerate((-0.01, 0.0, 0.01)):
        _scores(tmp_path, "lowrank", "lowrank-es", seed, [value + shift for value in rising], [0.05] * 7)
        _scores(tmp_path, "mezo", "mezo", seed, [0.20 + shift, 0.22, 0.23, 0.23, 0.24, 0.23, 0.24], [0.05] * 7)
    arms = load_scores(tmp_path)
    curve = mean_curve(arms["lowrank"], "template")
    assert [round(value, 4) for _, value, _, _ in curve[:2]] == [0.20, 0.28]  # the seeds' mean per mark
    assert time_to_reach(curve, 0.30) == 1200.0 and time_to_reach(curve, 0.50) == 3000.0
    assert time_to_reach(mean_curve(arms["mezo"], "template"), 0.30) is None
    slope, low, high = last_slope(arms["lowrank"])  # marks 2400-3600: +5 and +6 points per 600 s
    assert 4.5 < slope < 6.5 and low > 0
    flat = last_slope(arms["mezo"])
    assert flat[1] < 0 < flat[2]
    page = curves_table(tmp_path)
    assert "| lowrank-es | 3 | 20.0% -> 58.0%" in page and "not reached" in page
    said = [sentence(seeds[0]["label"], mean_curve(seeds, "template"), mean_curve(seeds, "transfer"), last_slope(seeds))
            for seeds in arms.values()]
    assert "still rising" in said[0] and "flat within the noise" in said[1]
    assert "(reaching 30% by 1,200 CPU s, 40% by 1,800 CPU s, 50% by 3,000 CPU s)" in said[0]
    fast = [(600.0 * index, value, value, value) for index, value in enumerate([0.2, 0.55, 0.6, 0.62])]
    assert "(reaching 30%, 40% and 50% by 600 CPU s)" in sentence("grpo-lora", fast, fast, None)
    assert curves_table(tmp_path / "nothing").startswith("not run yet")
    assert "not scored yet" not in page
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "mezo_seed3.json").write_text("{}")  # trained, its scores to come
    assert curves_table(tmp_path).endswith("\n\nTrained, not scored yet (not in the table): mezo seed 3.\n")


def test_es_against_grpo_is_called_ahead_or_behind_only_from_two_seeds_each(tmp_path, monkeypatch):
    from bench.curves.page import load_scores
    from bench.labbook.pages import curves

    grpo = [0.20 + 0.03 * index for index in range(13)]  # 13 marks, 0 to 7,200 CPU s (the hour); ends at 56%
    es = [0.20 + 0.01 * index for index in range(13)]  # ends at 32%, still rising
    _scores(tmp_path, "grpo_lora", "grpo-lora", 0, grpo, [0.1] * 13)
    _scores(tmp_path, "lowrank", "lowrank-es", 0, es, [0.1] * 13)
    monkeypatch.setattr(curves, "_scores", lambda: load_scores(tmp_path))
    one = curves.against_grpo()
    assert curves.readme_line() == ("grpo-lora 56.0% (1 seed), lowrank-es 32.0% (1 seed) at 7,200 CPU seconds of 2 "
                                    "threads.")
    assert "lowrank-es (1 seed) 32.0%" in one and "not yet separated (one seed) from grpo-lora (1 seed, 56.0%)" in one
    for seed, shift in ((1, 0.01), (2, -0.01)):
        _scores(tmp_path, "grpo_lora", "grpo-lora", seed, [value + shift for value in grpo], [0.1] * 13)
        _scores(tmp_path, "lowrank", "lowrank-es", seed, [value + shift for value in es], [0.1] * 13)
    three = curves.against_grpo()
    assert "lowrank-es (3 seeds) 32.0%" in three and "behind (not caught up within an hour) grpo-lora" in three
    assert "32.0%, still rising, behind" in three and "at 7,200 CPU s" in three


def test_an_es_arms_iterations_that_moved_nothing_are_counted_from_its_kept_update_logs(tmp_path):
    """A MeZO step whose two candidates scored alike has coefficients (0, 0): the sentence names how many."""
    import json

    from bench.curves.page import sentence, still_iterations

    for seed, coefficients in ((0, [[0.0, 0.0], [0.5, -0.5], [0.0, 0.0]]), (1, [[0.0, 0.0], [0.25, -0.25]])):
        kept = tmp_path / "replay" / f"mezo_seed{seed}"
        kept.mkdir(parents=True)
        (kept / "updates.json").write_text(json.dumps([
            {"kind": "seeds", "iteration": index, "seeds": [7, 7], "coefficients": pair}
            for index, pair in enumerate(coefficients)]))
    seeds = [{"arm": "mezo", "seed": 0}, {"arm": "mezo", "seed": 1}]
    assert still_iterations(seeds, tmp_path) == (3, 5)
    assert still_iterations([{"arm": "grpo_lora", "seed": 0}], tmp_path) is None  # GRPO keeps no update log
    curve = [(0.0, 0.2, 0.2, 0.2), (600.0, 0.25, 0.25, 0.25)]
    said = sentence("mezo", curve, curve, None, (3, 5))
    assert "; 3 of its 5 iterations (60%) moved nothing (every candidate scored alike); too few marks" in said
    assert "moved nothing" not in sentence("mezo", curve, curve, None, (0, 5))
    assert " and from 20.0% to 25.0% past it" in said
    flat = [(0.0, 0.0781, 0.0781, 0.0781), (600.0, 0.0781, 0.0781, 0.0781)]  # the same to a tenth: one phrase
    assert " and stayed at 7.8% past it" in sentence("mezo", curve, flat, None)


def test_unended_transfer_answers_are_called_cut_only_where_a_larger_budget_raised_the_score():
    from bench.curves.page import transfer_cut

    def seed(accuracy, ended):  # the last mark's transfer record at budgets 64, 128, 192 (scored), 256
        budgets = ("64", "128", "192", "256")
        return {"marks": [{"transfer": {"scored_budget": 192, "accuracy_by_budget": dict(zip(budgets, accuracy)),
                                        "ended_by_budget": dict(zip(budgets, ended))}}]}

    looping = seed([0.04, 0.04, 0.04, 0.04], [0.797, 0.802, 0.802, 0.8125])  # lowrank-es seed 0 at 7,200 CPU s
    assert transfer_cut([looping]) == (" (80.2% ended within 192 tokens, 81.2% within 256; scored the same from 64 "
                                       "to 256)")
    late = seed([0.04, 0.10, 0.12, 0.12], [0.60, 0.80, 0.85, 0.86])  # settles at 192
    assert transfer_cut([looping, late]) == (" (80.2% ended within 192 tokens, 81.2% within 256; scored the same "
                                             "from 192 to 256)")
    cut = seed([0.04, 0.10, 0.12, 0.15], [0.60, 0.80, 0.85, 0.95])  # 256 tokens still found answers
    assert transfer_cut([looping, cut]) == (" (answers cut: 80.2% ended within 192 tokens, 81.2% within 256, which "
                                            "scored 9.5%)")
    # mezo seed 0 at 7,200 CPU s: 256 tokens scored one answer fewer, and 89.58% ended (not a rounded 90%)
    lost = seed([0.0833, 0.0781, 0.0781, 0.0729], [0.8177, 0.875, 0.8958, 0.9531])
    assert transfer_cut([lost]) == (" (89.6% ended within 192 tokens, 95.3% within 256, which scored 7.3%: answers "
                                    "that ran on lost correct ones)")
    assert transfer_cut([seed([0.3] * 4, [0.95] * 4)]) == ""  # 90% or more ended: no flag


@pytest.mark.slow
def test_only_the_long_answers_go_to_the_whole_budget_and_every_answer_is_the_same():
    """The curves' scorer (FIRST_PASS): every answer generated to a first budget, the ones not ended by then again
    at the whole budget, gives the same completions as one generation at the whole budget, on the built-in model."""
    from bench.method_matrix.measure import RETOKENIZED_MARGIN, generate_long_last
    from evotune.backends import HFBackend
    from evotune.evaluation.generation import generate_in_chunks
    from evotune.tasks import get_task
    from evotune.tasks.phrasings import transfer_rows

    backend = HFBackend.load("smollm2-135m-instruct", dtype="float32")
    groups = transfer_rows(7, 2, "+", set(), per_group=4)  # other wordings: some base answers run long
    rows = get_task("arithmetic", seed=7, num_eval=8).eval_rows + [row for group in groups.values() for row in group]
    whole = generate_in_chunks(backend, rows, 96)
    first = 40
    lengths = [len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in whole]
    assert any(length < first - RETOKENIZED_MARGIN for length in lengths)  # kept from the first pass
    assert any(length >= first for length in lengths)  # generated again, past the first budget
    assert generate_long_last(backend, rows, 96, first) == whole
