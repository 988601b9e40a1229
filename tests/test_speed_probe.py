"""`evotune doctor --speed`: the probe times one quickstart generate, and the quickstart time it predicts scales
SPEED_REFERENCE, which must be what bench/results/quickstart/speed_reference.json measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotune import doctor

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_is_the_measured_one():
    data = json.loads((ROOT / "bench/results/quickstart/speed_reference.json").read_text())
    measured = {"probe_s": data["probe"]["probe_s"], "quickstart_s": data["quickstart_s"],
                "machine": data["machine"]["cpu"], "dtype": data["probe"]["dtype"],
                "threads": data["probe"]["threads"]}
    assert doctor.SPEED_REFERENCE == measured


def test_the_check_on_another_machine_used_this_reference_and_its_prediction():
    """The check (a probe, then the quickstart, on another machine) must have been predicted from the reference the
    probe uses now, by the probe's own formula: a new reference makes the quoted check stale, and this fails. Until a
    check of the current reference has run, there is neither a check file nor a SPEED_CHECK."""
    checks = sorted((ROOT / "bench/results/quickstart").glob("speed_check_*.json"))
    if doctor.SPEED_CHECK is None:
        assert checks == [], "a check file is there: set SPEED_CHECK from it"
        return
    assert len(checks) == 1, checks
    data = json.loads(checks[0].read_text())
    prediction = data["prediction"]
    assert prediction["reference"] == doctor.SPEED_REFERENCE
    assert data["machine"]["cpu"] != doctor.SPEED_REFERENCE["machine"]
    assert prediction["predicted_s"] == pytest.approx(doctor.expected_quickstart_seconds(data["probe"]["probe_s"]),
                                                      abs=0.05)
    assert prediction["measured_over_predicted"] == pytest.approx(data["quickstart_s"] / prediction["predicted_s"],
                                                                  abs=5e-4)
    assert doctor.SPEED_CHECK == {"machine": data["machine"]["cpu"], "dtype": data["probe"]["dtype"],
                                  "measured_over_predicted": prediction["measured_over_predicted"]}


def test_the_expected_time_scales_with_the_probe():
    reference = doctor.SPEED_REFERENCE
    assert doctor.expected_quickstart_seconds(reference["probe_s"]) == pytest.approx(reference["quickstart_s"])
    assert doctor.expected_quickstart_seconds(2 * reference["probe_s"]) == pytest.approx(
        2 * reference["quickstart_s"])


def test_the_probe_times_its_own_fixed_generate(tiny_model_dir):
    result = doctor.speed_probe(repeats=2, model=tiny_model_dir)
    assert result["prompts"] == doctor.PROBE["batch_size"] == 16
    assert result["max_new_tokens"] == doctor.PROBE["max_new_tokens"] == 48
    assert len(result["seconds"]) == 2 and result["probe_s"] > 0
    text = doctor.describe_speed(result)
    minutes = doctor.expected_quickstart_seconds(result["probe_s"]) / 60
    assert f"about {minutes:.0f} minutes here" in text and doctor.SPEED_REFERENCE["machine"] in text
    assert (f"{doctor.SPEED_CHECK['measured_over_predicted']:.2f}x the time its probe predicted" if doctor.SPEED_CHECK
            else "not yet checked on another machine type") in text


@pytest.mark.slow  # loads the built-in SmolLM2-135M and generates 4 x 16 prompts x 48 tokens
def test_doctor_speed_prints_the_expected_quickstart_time(capsys):
    from evotune.cli.main import main

    assert main(["doctor", "--speed"]) == 0
    assert "Expect `evotune train` with no config to take about" in capsys.readouterr().out
