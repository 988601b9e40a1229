"""A reward function whose grader is down while a file `grader_down` lies beside this module (touch it to break the
reward, remove it to fix it), so one module serves a failing run and the fixed one. Copied next to its flag by
tests/helpers.py (flaky_reward_module) and bench/reliability/inputs.py."""

import os

FLAG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grader_down")


def score(prompts, completions, **columns):
    if os.path.exists(FLAG):
        raise ValueError("the grader is down")
    return [-float(len(completion)) for completion in completions]
