"""Baselines that ES is judged against (GRPO through TRL); imported on demand, TRL is optional."""
