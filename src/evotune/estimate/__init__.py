"""`evotune estimate`: a run's peak memory and seconds per iteration, predicted before it starts.

The counts come from the config and the model's shape (workload.py: copies of the weights, KV cache, activations,
passes over the weights, tokens forward and backward, token distributions); each term's
coefficient (MiB per counted MiB, seconds per unit) is fitted on the scaling study's measured cells
(bench/scaling/fit.py: memory by non-negative least squares on relative error, time by the non-negative fit with
the smallest worst relative error) and kept in coefficients.json with the machine
and speed probe they were measured with. Seconds scale to another machine by its speed probe (`evotune doctor
--speed`) against the study's.

Modules: `shape` (a model's shape from its config), `workload` (an iteration's counts from a run's config), `model`
(the fitted terms), `report` (the command), `methods` (`--method`'s names, light enough for the parser).
"""
