"""bench/scaling: the shapes are the published models' (parameter counts from their configs), a built model has the
parameters its shape says, the memory guard stops a process that crosses its limit and records it, a cell predicted
not to fit never starts, and a cell runs end to end on a tiny shape with every number it reports read from its run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.scaling import arms, cell, guard, predict, shapes

# Each model's parameter count as its own release states it (at its own vocabulary).
PUBLISHED = {"SmolLM2-135M": 134_515_008, "SmolLM2-360M": 361_821_120, "Qwen2.5-0.5B": 494_032_768,
             "Qwen2.5-1.5B": 1_543_714_304, "SmolLM2-1.7B": 1_711_376_384, "Qwen2.5-3B": 3_085_938_688,
             "Qwen2.5-7B": 7_615_616_512, "Llama-3-8B": 8_030_261_248}
TINY = shapes.Shape("Tiny", "qwen2", 64, 2, 2, 1, 128, False, 1000)


def test_every_shape_has_its_published_parameter_count():
    public = {name: shape for name, shape in shapes.SHAPES.items() if shape.published}
    assert set(PUBLISHED) == set(public)
    for name, shape in public.items():
        assert shape.parameters(shape.published_vocab) == PUBLISHED[name]
        assert shape.parameters() <= PUBLISHED[name]  # SmolLM2's smaller vocabulary only shrinks a model


def test_the_shapes_of_other_proportions_pull_layers_and_width_apart():
    """deep-narrow-40L and shallow-wide-4L lie outside the public shapes' layers-per-width range on either side, so
    the time fit can tell a per-layer cost from a per-parameter one."""
    public = [shape for shape in shapes.SHAPES.values() if shape.published]
    ratio = [shape.num_hidden_layers / shape.hidden_size for shape in public]
    deep, wide = shapes.SHAPES["deep-narrow-40L"], shapes.SHAPES["shallow-wide-4L"]
    assert set(shapes.PROPORTIONS) == {"deep-narrow-40L", "shallow-wide-4L", "narrow-12L", "narrow-24L"}
    assert deep.num_hidden_layers / deep.hidden_size > 2 * max(ratio)
    assert wide.num_hidden_layers / wide.hidden_size < min(ratio) / 2
    # narrow-12L: deep-narrow's width at a public shape's depth (the small matmuls' cost apart from the depth)
    narrow = shapes.SHAPES["narrow-12L"]
    assert narrow.hidden_size == deep.hidden_size and narrow.intermediate_size == deep.intermediate_size
    assert min(shape.num_hidden_layers for shape in public) / 2 <= narrow.num_hidden_layers < deep.num_hidden_layers
    # narrow-24L: the same width at a third depth, so a per-layer cost and a per-step cost come apart
    narrow_widths = [shape for shape in shapes.SHAPES.values() if shape.hidden_size == deep.hidden_size]
    assert sorted(shape.num_hidden_layers for shape in narrow_widths) == [12, 24, 40]


def test_a_built_model_has_the_parameters_its_shape_says_and_always_generates_the_whole_budget(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = shapes.build(TINY, "float32", tmp_path, max_new_tokens=5)
    model = AutoModelForCausalLM.from_pretrained(directory)
    assert sum(parameter.numel() for parameter in model.parameters()) == TINY.parameters()
    assert json.loads((directory / "built.json").read_text())["vocab"] == shapes.TOKENIZER_VOCAB
    tokenizer = AutoTokenizer.from_pretrained(directory)
    prompt = tokenizer("What is 1 + 1?", return_tensors="pt")
    eos = model.generation_config.eos_token_id
    with torch.no_grad():  # even a model whose first choice is always the end of sequence writes 5 tokens
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(shapes.TOKENIZER_VOCAB).index_fill_(0, torch.tensor([eos]),
                                                                                                  1e4))
        output = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert output.shape[1] - prompt["input_ids"].shape[1] == 5
    assert shapes.build(TINY, "float32", tmp_path, max_new_tokens=5) == directory  # built once, then read


def test_the_guard_stops_a_process_that_crosses_its_limit_and_lets_one_under_it_finish(tmp_path):
    # up to 1.3 GiB in 32 MiB steps, 0.15 s apart; it prints "whole" if it ever gets there
    grow = [sys.executable, "-c", "import time; blocks = []\nfor _ in range(40): blocks.append(bytearray(2**25)); "
                                  "time.sleep(0.15)\nprint('whole', flush=True); time.sleep(1)"]
    stopped = guard.run_guarded(grow, limit_mib=300, log=tmp_path / "grow.log")
    assert stopped.exit_code == -9 and "whole" not in (tmp_path / "grow.log").read_text(), stopped  # stopped early
    assert stopped.stopped_at_mib is not None and stopped.stopped_at_mib > 300, stopped
    small = guard.run_guarded([sys.executable, "-c", "x = bytearray(2**26)"], limit_mib=2000, log=tmp_path / "s.log")
    assert small.stopped_at_mib is None and small.exit_code == 0 and 64 < small.peak_rss_mib < 2000


def test_the_guard_counts_the_cells_cpu_apart_from_other_work_beside_it(tmp_path):
    spin = "import time\nend = time.process_time() + {0}\nwhile time.process_time() < end: pass"
    alone = guard.run_guarded([sys.executable, "-c", spin.format(1.0)], limit_mib=2000, log=tmp_path / "a.log")
    assert alone.exit_code == 0 and 0.9 < alone.cpu_s < 2.0, alone  # its 1 s of spinning (and python's start)
    beside = subprocess.Popen([sys.executable, "-c", spin.format(4.0)])  # other work, spinning all the while
    try:
        time.sleep(0.3)  # under way before the cell starts
        shared = guard.run_guarded([sys.executable, "-c", spin.format(1.0)], limit_mib=2000, log=tmp_path / "b.log")
    finally:
        beside.kill()
        beside.wait()
    # the other spinner held a core for most of the cell's wall time (more, on a machine with a core to spare)
    assert shared.other_work_cpu_s >= 0.5 and 0.9 < shared.cpu_s < 2.0, shared


def test_a_cell_predicted_not_to_fit_does_not_start_and_a_smaller_unit_is_named(tmp_path, monkeypatch):
    shape = shapes.SHAPES["SmolLM2-1.7B"]
    terms = predict.terms(shape, "full_es_batched", "float32")
    assert terms["stacked_candidates"] == pytest.approx(16 * terms["weights"], rel=1e-3)
    monkeypatch.setattr(cell, "build", lambda *args, **kwargs: pytest.fail("a cell predicted not to fit was built"))
    record = cell.run_cell("SmolLM2-1.7B", "grpo_full", "float32", tmp_path, tmp_path / "work", limit_mib=20_000)
    assert record["status"] == "predicted not to fit" and record["predicted_peak_mib"] > 20_000
    # even one prompt's 8 completions asks for more: the record says so, at the figure the screen computed
    assert record["smallest_unit"] == {"prompts": 1}
    assert record["predicted_peak_at_smallest_unit_mib"] == predict.predicted_peak_mib(shape, "grpo_full", "float32",
                                                                                       0.125) > 20_000
    assert cell.fraction_to_run("full_es_batched", shape, "float32", 20_000) is None  # 2 stacked copies: ~27 GiB
    # the peer materializes every member: at 360M its whole unit would not fit, a smaller one does
    assert predict.predicted_peak_mib(shapes.SHAPES["SmolLM2-360M"], "peer_torcheggroll", "float32") > 20_000
    assert cell.fraction_to_run("peer_torcheggroll", shapes.SHAPES["SmolLM2-360M"], "float32", 20_000) < 0.5
    # below 250M parameters a cell runs the whole unit; at 1.7B a quarter of it (time), GRPO's prompts as ES's members
    assert cell.fraction_to_run("full_es", shapes.SHAPES["SmolLM2-135M"], "float32", 20_000) == 1.0
    assert cell.fraction_to_run("grpo_lora", shape, "float32", 20_000) == 0.25
    assert arms.unit("grpo_lora", 0.25) == {"prompts": 2} and arms.unit("full_es", 0.25) == {"members": 4}
    assert arms.tokens_per_iteration("grpo_lora", 0.25) == 2 * arms.GRPO_GENERATIONS * arms.MAX_NEW_TOKENS


def test_the_screen_predicts_the_arms_the_estimate_models_by_it_and_the_peer_from_first_principles(monkeypatch):
    from bench.scaling import fit
    from evotune.estimate import model

    shape = shapes.SHAPES["Qwen2.5-0.5B"]
    by, fitted = predict.predicted_terms(shape, "grpo_lora", "float32", 0.5)
    cell_row = next(row for row in fit.errors(fit.rows(), model.load_coefficients())
                    if row["shape"] == "Qwen2.5-0.5B" and row["arm"] == "grpo_lora")
    assert by == "evotune estimate" and abs(sum(fitted.values()) - cell_row["predicted_mib"]) <= 1
    by, fitted = predict.predicted_terms(shape, "generation", "float32", 0.5)  # the estimate models it: the baseline
    cell_row = next(row for row in fit.errors(fit.rows(), model.load_coefficients())
                    if row["shape"] == "Qwen2.5-0.5B" and row["arm"] == "generation")
    # the screen's terms are rounded each to 0.1 MiB, the table's total to 1 MiB
    assert by == "evotune estimate" and abs(sum(fitted.values()) - cell_row["predicted_mib"]) <= 1
    # the peer is not ours: the estimate does not model it
    assert predict.predicted_terms(shape, "peer_torcheggroll", "float32")[0] == "first principles"
    # a fit on fewer than three sizes has not told its per-parameter terms apart: first principles screen then
    committed = model.load_coefficients()
    monkeypatch.setattr(model, "load_coefficients", lambda: {**committed, "shapes": committed["shapes"][:2]})
    assert predict.predicted_terms(shape, "grpo_lora", "float32", 0.5) == (
        "first principles", predict.terms(shape, "grpo_lora", "float32", 0.5))


def test_a_unit_that_did_not_fit_though_predicted_to_runs_again_smaller_and_keeps_the_attempt(tmp_path, monkeypatch):
    """The peer at 135M was predicted at 18,185 MiB for 16 members and stopped at 20,512: the cell goes on at 8
    members, and its record says what did not fit and where it stopped. The guard's own stop is tested above; here
    the guarded process's outcome is stood in for, by the memory each unit reached."""
    reached = {16: 20_512.0, 8: 11_000.0}
    tried = []

    def measure(shape, arm, dtype, model_dir, work, limit_mib, fraction, iterations, device):
        members = arms.unit(arm, fraction)["members"]
        tried.append(members)
        common = {"unit": arms.unit(arm, fraction), "fraction_of_unit": fraction,
                  "predicted_peak_at_fraction_mib": 1.0}
        if reached[members] > limit_mib:
            return {**common, "status": "did not fit", "stopped_at_mib": reached[members]}
        return {**common, "status": "ran", "peak_rss_mib": reached[members], "seconds_per_iteration": 9.0}

    monkeypatch.setattr(cell, "build", lambda *args, **kwargs: tmp_path)
    monkeypatch.setattr(cell, "measure", measure)
    record = cell.run_cell("SmolLM2-135M", "peer_torcheggroll", "float32", tmp_path, tmp_path / "work",
                           limit_mib=20_000)
    assert tried == [16, 8] and record["status"] == "ran" and record["fraction_of_unit"] == 0.5
    assert record["did_not_fit_at"] == [{"unit": {"members": 16}, "fraction_of_unit": 1.0, "stopped_at_mib": 20_512.0,
                                         "predicted_peak_at_fraction_mib": 1.0}]
    assert "{'members': 16} did not fit: stopped at 20,512 MiB" in record["smaller_unit"]
    reached[8] = 30_000.0  # SFT's unit is whole or nothing; an ES unit tries every smaller fraction, then says so
    reached.update({4: 25_000.0, 2: 21_000.0})
    tried.clear()
    record = cell.run_cell("SmolLM2-135M", "peer_torcheggroll", "float32", tmp_path, tmp_path / "work",
                           limit_mib=20_000)
    assert tried == [16, 8, 4, 2] and record["status"] == "did not fit" and len(record["did_not_fit_at"]) == 3


@pytest.mark.engine  # two evotune processes on a model built from SmolLM2's whole tokenizer
@pytest.mark.parametrize("arm", ["generation", "full_es", "grpo_lora", "peer_torcheggroll"])
def test_a_cell_runs_end_to_end_on_a_tiny_shape(tmp_path, monkeypatch, arm):
    if arm == "peer_torcheggroll":
        pytest.importorskip("torcheggroll", reason="the peer comes with the bench extra (in dev)")
    monkeypatch.setitem(shapes.SHAPES, "Tiny", TINY)
    # a limit the screen lets the whole unit through (the fitted estimate counts GRPO's 64 sequences of logits at
    # SmolLM2's vocabulary, about 6 GiB); the peak reached is checked against a tighter bound below
    record = cell.run_cell("Tiny", arm, "float32", tmp_path / "cache", tmp_path / "work", limit_mib=12_000,
                           iterations=2)
    assert record["status"] == "ran", record
    assert len(record["step_seconds"]) == 2 and record["seconds_per_iteration"] > 0
    assert record["new_tokens_per_iteration"] == arms.tokens_per_iteration(arm)
    assert 100 < record["peak_rss_mib"] < 6000
    run = tmp_path / "work" / "run"  # the saved weights are gone once timed; the metrics stay
    assert not [path for path in run.iterdir() if path.is_dir()] if run.is_dir() else True
    assert (run / "metrics.jsonl").is_file() or arm in ("generation", "peer_torcheggroll")


def test_a_cell_stops_before_running_when_its_saved_weights_would_fill_the_disk(tmp_path, monkeypatch):
    free = {"bytes": 4 * 2**30}
    monkeypatch.setattr(cell.shutil, "disk_usage", lambda path: shutil_usage(free["bytes"]))
    needed = 3 * shapes.SHAPES["Qwen2.5-1.5B"].parameters() * 4 / 2**30  # final model + checkpoint + slack, float32
    with pytest.raises(SystemExit, match=rf"Qwen2.5-1.5B needs {needed:.1f} GiB free under .* and 4.0 GiB are free"):
        cell.check_disk(shapes.SHAPES["Qwen2.5-1.5B"], "float32", tmp_path / "not" / "made")
    free["bytes"] = 40 * 2**30
    cell.check_disk(shapes.SHAPES["Qwen2.5-1.5B"], "float32", tmp_path / "not" / "made")


def shutil_usage(free: int):
    import shutil

    return shutil._ntuple_diskusage(total=free * 2, used=free, free=free)


def test_the_gpu_wrapper_runs_its_module_as_main_and_passes_its_exit_code_on(tmp_path):
    """On a GPU every cell's command runs under gpu_peak.py (the allocator's peak read at exit); here, on a CPU, it
    must run the module with its arguments and exit as it does, writing no peak (no CUDA was used)."""
    script = tmp_path / "job.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\nsys.exit(3)\n")
    done = subprocess.run([sys.executable, "-m", "bench.scaling.gpu_peak", str(tmp_path / "peak.json"), "-m", "job",
                           "--flag", "value"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}:{Path.cwd()}"})
    assert done.returncode == 3 and "args ['--flag', 'value']" in done.stdout, done.stderr
    assert not (tmp_path / "peak.json").exists()


def test_nvidia_smis_listing_is_read_per_process():
    listing = "1234, 8021\n1234, 100\n77, 5\nNo running processes found\n"
    assert guard.gpu_mib_by_pid(listing) == {1234: 8121.0, 77: 5.0}


def test_the_largest_model_sentence_groups_methods_by_the_largest_shape_each_ran_and_says_why_not_the_next(tmp_path):
    from bench.scaling import page

    machine = {"cpu": "AMD EPYC", "threads": 2}

    def write(shape, arm, status, **fields):
        folder = tmp_path / shape
        folder.mkdir(exist_ok=True)
        record = {"shape": shape, "arm": arm, "status": status, "limit_mib": 20_480, "machine": machine, **fields}
        (folder / f"{arm}.json").write_text(json.dumps(record))

    for shape in ("SmolLM2-135M", "Qwen2.5-1.5B"):
        write(shape, "lowrank", "ran", peak_rss_mib=2048.0, unit={"members": 16})
    write("SmolLM2-135M", "grpo_full", "ran", peak_rss_mib=16_384.0, unit={"prompts": 8})
    write("Qwen2.5-1.5B", "grpo_full", "predicted not to fit", predicted_peak_mib=40_960.0,
          smallest_unit={"prompts": 1}, predicted_peak_at_smallest_unit_mib=22_528.0)
    write("SmolLM2-135M", "peer_torcheggroll", "ran", peak_rss_mib=1.0)  # the peer is not a method of ours
    write("Qwen2.5-1.5B", "sft_lora", "ran", peak_rss_mib=6144.0, unit={"members": 2}, fraction_of_unit=0.125,
          smaller_unit="{'members': 2} instead of {'members': 16}: {'members': 4} did not fit: stopped at 21,000 MiB")
    assert page.largest(tmp_path) == (
        "On 2 cores of AMD EPYC with a memory limit of 20.0 GiB per cell, among the shapes measured so far: "
        "lowrank-es and sft up to Qwen2.5-1.5B (1.39B parameters; peak 2.0-6.0 GiB, sft only at 2 members); "
        "grpo-full up to SmolLM2-135M (0.13B parameters; peak 16.0 GiB; grpo-full at Qwen2.5-1.5B: "
        "predicted to need 40.0 GiB, 22.0 GiB at 1 prompt).")


def test_phase_peaks_charge_an_allocation_to_the_phase_it_was_made_in():
    import numpy as np

    from bench.scaling.phases import PhasePeaks

    peaks = PhasePeaks()
    peaks.sample()
    with peaks.phase("backward"):
        # measured here, not against "outside": a shared test worker's resident set can fall between two samples
        before = peaks.process.memory_info().rss / 2**20
        held = np.ones(64 * 2**20 // 8)  # 64 MiB, written so that it is resident
    assert peaks.peaks["backward"] > before + 50 and held.sum() > 0 and "outside" in peaks.peaks
    assert peaks.stack == ["outside"]
    assert peaks.wrapped("loss", lambda value: value + 1)(1) == 2 and "loss" in peaks.peaks


@pytest.mark.engine  # a GRPO cell's command on the tiny shape, in this process
def test_the_phase_trace_finds_a_grpo_cells_peak_in_a_training_phase(tmp_path, monkeypatch):
    import torch
    from trl import GRPOTrainer

    from bench.scaling.phases import PHASES, PhasePeaks, trace

    for name in PHASES:  # trace() wraps them for good: put them back for the tests after this one
        monkeypatch.setattr(GRPOTrainer, name, getattr(GRPOTrainer, name))
    monkeypatch.setattr(torch.Tensor, "backward", torch.Tensor.backward)
    monkeypatch.setattr(sys, "argv", sys.argv)
    monkeypatch.setitem(shapes.SHAPES, "Tiny", TINY)
    model = shapes.build(TINY, "float32", tmp_path / "cache", arms.MAX_NEW_TOKENS)
    (tmp_path / "work").mkdir()
    command = cell.command_line("grpo_full", model, "float32", tmp_path / "work", 1.0, 1)
    peaks = PhasePeaks()
    trace(command, peaks)
    assert {"outside", "_generate", "backward", "compute_loss"} <= set(peaks.peaks), peaks.peaks
    assert max(peaks.peaks, key=peaks.peaks.get) != "outside", peaks.peaks  # the step, not loading, sets the peak
