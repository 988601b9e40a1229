"""Eager against compiled generation (`compile_generation: true`: a static KV cache and the decoding step compiled
by torch.compile) on this machine, side by side in one run, with the completions compared text for text.

The compile is paid on the first generate of each batch shape; the timed repeats come after it, and the first
call's time is reported apart. A candidate's weights are written in place between repeats (as ES does), so the
compiled step must read them fresh.

    python -m bench.speed.compile_generation --prompts 16 --max-new-tokens 48 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench.common import write_result
from evotune.backends import DEFAULT_MODEL, HFBackend  # noqa: E402
from evotune.config.checks import resolve_device  # noqa: E402
from evotune.spaces import FullParameterSpace  # noqa: E402
from evotune.strategies import OpenES  # noqa: E402
from evotune.tasks import get_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="compile_generation_cpu")
    args = parser.parse_args()
    device = resolve_device(args.device)
    rows = get_task("arithmetic", seed=0).train_rows[:args.prompts]
    prompts = [row["prompt"] for row in rows]
    members = OpenES(population_size=2 * args.repeats, sigma=2e-3, antithetic=True, seed=0).ask()
    result = {"command": "python -m bench.speed.compile_generation " + " ".join(sys.argv[1:]), "model": args.model,
              "dtype": args.dtype, "device": device, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens}
    texts, seconds, first = {}, {}, {}
    for arm, compiled in (("eager", False), ("compiled", True)):
        backend = HFBackend.load(args.model, args.dtype, device, compile_generation=compiled)
        backend.model.generation_config.min_new_tokens = args.max_new_tokens  # fixed-length: the same work
        space = FullParameterSpace(backend.model, noise_kind="rademacher")
        started = time.perf_counter()
        backend.generate(prompts, args.max_new_tokens)  # the compiled arm pays its compile here
        first[arm] = time.perf_counter() - started
        texts[arm], seconds[arm] = [], []
        for member in members[:args.repeats]:
            space.apply(member)
            started = time.perf_counter()
            texts[arm].append(backend.generate(prompts, args.max_new_tokens))
            seconds[arm].append(time.perf_counter() - started)
        space.restore()
        del backend, space
    median = {arm: statistics.median(values) for arm, values in seconds.items()}
    same = sum(a == b for x, y in zip(texts["eager"], texts["compiled"]) for a, b in zip(x, y))
    result.update(first_call_seconds={k: round(v, 2) for k, v in first.items()},
                  seconds_per_generate={k: [round(x, 3) for x in v] for k, v in seconds.items()},
                  median_seconds={k: round(v, 3) for k, v in median.items()},
                  speedup_compiled_over_eager=round(median["eager"] / median["compiled"], 3),
                  identical_completions=f"{same}/{args.prompts * args.repeats}")
    write_result(args.name, result, study="speed")


if __name__ == "__main__":
    main()
