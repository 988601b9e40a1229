"""`evotune estimate`: a run's peak memory and seconds per iteration, predicted before it starts.

The counts come from the config and the model's shape (workload.py: copies of the weights, KV cache, activations,
passes over the weights, tokens forward and backward, token distributions). Memory: each term's coefficient (MiB per
counted MiB) is fitted by non-negative least squares on the scaling study's cells. Time: a per-matmul roofline
(roofline.py: each projection at the larger of its bytes' and its FLOPs' time) plus linear terms, at rates fitted
per machine type the study measured (bench/scaling/fit.py). Both are kept in coefficients.json with the machines and
speed probes they were measured with; another machine runs at the reference type's rates, scaled by its speed
probe (`evotune doctor --speed`) against the reference's.

Modules: `shape` (a model's shape from its config), `workload` (an iteration's counts from a run's config), `model`
(the fitted terms), `roofline` (the time's counts and rates), `report` (the command), `methods` (`--method`'s names,
light enough for the parser).
"""
