"""The lab book's index: what it is, every study page (a row each, from the page modules), what ran on which
hardware, and the general scripts. `{table}` is filled by render.py from the page modules."""

TEXT = """
# Lab book

What was measured, with the command that measured it and the file it wrote. Unless a page says otherwise: the
built-in SmolLM2-135M-Instruct on a 2-core CPU without a GPU. Every page is generated from its study's result files
(`python -m bench.labbook.render`, from `bench/labbook/pages/`), in one shape: what was asked, the setup with the
machines its files record, the results, what they mean, how to rerun. The numbers are small-model, small-budget
results; the papers' claims are for 0.5B-8B models over hundreds of iterations, and where we have not reproduced
one, the page says so. Every table the result files hold is also on [All result tables](../benchmark-tables.md).

## The studies

Every method against every other, tuned alike and trained for the same time on one machine type, is the matched
study of [Which method?](../which-method.md) (`bench/method_matrix/`); the studies below each answer one narrower
question on its own machine, dtype and budget, named on its page.

{table}

## Status by hardware

What ran on which hardware, generated from the result files:
<!-- claim:hardware-status --><!-- /claim -->

## The general scripts

Each writes JSON with the command that produced it to `bench/results/`:

- `python -m bench.speed.overhead`: ES iteration time over plain generation of the same workload, with the time of
  each phase of the loop (`--prefetch-arm`: also with `prefetch_candidates`)
- `python -m bench.speed.memory`: peak RSS in training over RSS of the loaded model
- `python -m bench.learning.learning`: held-out accuracy before and after on a real model, with plots
- `python -m bench.learning.heldout_eval RUN_DIR...`: a larger fresh held-out set, base against trained, Wilson
  intervals
- `python -m bench.learning.eval_tasks --task ...`: held-out evaluation with intervals, pass@k, KL
- `python -m bench.learning.stage_table`: held-out accuracy per stage (base, SFT, each method from it)
- `python -m bench.speed.population_batch`: population-batched against one-at-a-time candidate evaluation
- `python -m bench.speed.shared_prefix`: shared-prefix prefill on and off, identical completions counted
- `python -m bench.speed.vllm_prefix_cache`: vLLM's prefix caching (emptied per generate) on and off
- `python -m bench.speed.peer_es_at_scale`: evotune's ES iteration against the ES at Scale paper's loop written from
  its description
- `python -m bench.speed.generation_throughput`: generation tokens/s of the hf and vllm backends
- `python -m bench.speed.ray_scaling`: iteration time against the number of Ray actors, bytes exchanged
- `python -m bench.speed.dtype_speed`: bfloat16 against float32 on this machine
- `python -m bench.speed.grpo_memory`: GRPO's peak memory with the step's completions in one batch or in micro-batches
- `python examples/essa_toy_digits.py`: ESSA's Appendix E toy (singular values only, ES against gradient)
"""
