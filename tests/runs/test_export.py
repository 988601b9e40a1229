"""evotune.runs.export (`evotune export`): a plain transformers model directory from a model, a run or an adapter
(merged with --merge); nothing already in the output directory is replaced without --overwrite."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from helpers import KILL_AFTER_WEIGHTS, essa_config
from safetensors.torch import load_file

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.runs.export import check_output_dir, export_model
from evotune.trainer import Trainer


def test_export_refuses_a_directory_with_files_and_a_file_path(tiny_model_dir, tmp_path, capsys):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "config.json").write_text('{"mine": true}')
    assert main(["export", tiny_model_dir, "--output-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "config.json" in err and "Traceback" not in err
    assert (target / "config.json").read_text() == '{"mine": true}'

    a_file = tmp_path / "model.bin"
    a_file.write_text("x")
    assert main(["export", tiny_model_dir, "--output-dir", str(a_file)]) == 2
    # the message wraps at word boundaries, which move with the length of the temporary path
    assert "is a file" in " ".join(capsys.readouterr().err.split()) and a_file.read_text() == "x"

    (target / "notes.txt").write_text("kept")
    assert main(["export", tiny_model_dir, "--output-dir", str(target), "--overwrite"]) == 0
    assert json.loads((target / "config.json").read_text())["model_type"] == "llama"
    assert (target / "notes.txt").read_text() == "kept"  # --overwrite replaces what export writes, nothing else
    assert not (tmp_path / ".mine.partial").exists()


@pytest.mark.engine  # a process killed and resumed: the engine tier
def test_an_export_killed_midway_leaves_no_model_directory_and_the_next_one_succeeds(tiny_model_dir, tmp_path):
    output = tmp_path / "out"
    # kill -9 after the weights are written and before the tokenizer: a torn export, as a crash would leave it
    script = KILL_AFTER_WEIGHTS + f"""
from evotune.runs.export import export_model
export_model({tiny_model_dir!r}, {str(output)!r})
"""
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    staging = tmp_path / ".out.partial"
    assert (staging / "config.json").exists() and not output.exists()  # written, never moved into place

    assert main(["export", tiny_model_dir, "--output-dir", str(output)]) == 0  # no --overwrite needed
    assert not staging.exists()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(output), AutoTokenizer.from_pretrained(output)



def test_export_merge_generates_like_the_adapter(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from evotune.cli.main import main

    run = tmp_path / "run"
    trainer = Trainer(essa_config(tiny_model_dir), run)
    trainer.train()
    assert main(["export", str(run), "--merge", "--output-dir", str(tmp_path / "merged")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    inputs = trainer.backend.tokenizer(["What is 2 + 3?"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(merged(**inputs).logits, trainer.backend.model(**inputs).logits,
                                   rtol=1e-4, atol=1e-4)
        tokens = dict(max_new_tokens=8, do_sample=False, pad_token_id=trainer.backend.tokenizer.pad_token_id)
        assert torch.equal(merged.generate(**inputs, **tokens), trainer.backend.model.generate(**inputs, **tokens))


def test_export_refuses_an_adapter_without_merge(tiny_model_dir, tmp_path, capsys):
    from evotune.cli.main import main

    Trainer(essa_config(tiny_model_dir, iterations=1), tmp_path / "run").train()
    assert main(["export", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "--merge" in capsys.readouterr().err


def test_export_writes_the_weights_in_the_asked_dtype_with_the_tokenizer(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "bf16"
    result = export_model(tiny_model_dir, str(out), dtype="bfloat16")
    assert result == {"output_dir": str(out), "model": tiny_model_dir, "adapter": None, "base": tiny_model_dir,
                      "dtype": "bfloat16"}
    source = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    written = load_file(str(out / "model.safetensors"))
    assert written and all(tensor.dtype == torch.bfloat16 for tensor in written.values())
    for name, tensor in written.items():  # the fp32 weights rounded once to bf16
        assert torch.equal(tensor, source[name].to(torch.bfloat16)), name
    assert len(AutoTokenizer.from_pretrained(out)) == len(AutoTokenizer.from_pretrained(tiny_model_dir))


def test_an_unknown_dtype_fails_before_anything_is_written(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="float13"):
        export_model(tiny_model_dir, str(tmp_path / "out"), dtype="float13")
    assert not (tmp_path / "out").exists()


def test_export_refuses_the_models_own_directory_even_with_overwrite(tiny_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    before = {path.name: path.read_bytes() for path in model.iterdir()}
    with pytest.raises(ConfigError, match="is the model being exported"):
        export_model(str(model), str(model), overwrite=True)
    assert {path.name: path.read_bytes() for path in model.iterdir()} == before


def test_check_output_dir_accepts_new_and_empty_directories_and_lists_what_it_would_replace(tmp_path):
    model = tmp_path / "model"
    check_output_dir(tmp_path / "new" / "deeper", model, overwrite=False)  # created by save_pretrained
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty", model, overwrite=False)
    full = tmp_path / "full"
    full.mkdir()
    for index in range(7):
        (full / f"file{index}.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"already holds files \(file0.txt, file1.txt, file2.txt, file3.txt, "
                                          r"file4.txt, \.\.\.\).*--overwrite"):
        check_output_dir(full, model, overwrite=False)
    check_output_dir(full, model, overwrite=True)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match="a_file is a file; choose a directory path"):
        check_output_dir(tmp_path / "a_file" / "sub" / "out", model, overwrite=False)


def test_a_truncated_weights_file_is_one_line_naming_it(tiny_model_dir, tmp_path, capsys):
    """A final/ whose weights a kill or a full disk cut short: one error line naming the file and the way forward
    (its checkpoint), no traceback, and no output directory."""
    from evotune.cli.main import main

    final = tmp_path / "run" / "final"
    shutil.copytree(tiny_model_dir, final)
    weights = final / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert main(["export", str(final), "--output-dir", str(tmp_path / "out")]) == 2
    error = " ".join(line.strip() for line in capsys.readouterr().err.splitlines())
    assert error.startswith(f"evotune: error: {weights} cannot be read (") and "truncated or damaged" in error
    assert f"evotune export {final.parent}/checkpoint" in error
    assert not (tmp_path / "out").exists()
