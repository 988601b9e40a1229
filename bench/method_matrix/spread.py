"""Does ES vary less from seed to seed than GRPO (ES at Scale's claim)? The method study's answer: matched pairs of
arms, each with one-sided F tests of the two variances over seeds, for the papers' table (page.py) and the claim
matrix-spread-answer."""

from __future__ import annotations

from pathlib import Path

from bench.method_matrix.rows import STUDY, Arm, arm
from bench.method_matrix.tables import TASK_NAMES, cut_text, seeds_text

# "ES varies less from seed to seed" compares arms that move the same weights, chosen before any spread was seen:
# picking the steadiest of four ES arms against the steadiest of two GRPO arms would favour ES by the choice alone.
SPREAD_PAIRS = (("full_es", "grpo_full", "every weight"), ("es_lora", "grpo_lora", "the same adapter"))
SPREAD_LEVEL = 0.05


def spread_test(es: Arm, grpo: Arm) -> tuple[float, float, float]:
    """(variance ratio GRPO/ES, p of 'ES varies less', p of 'GRPO varies less'): one-sided F tests of the two
    variances over seeds. With 5 seeds each, one variance must be 6.4 times the other for p < 0.05: a std
    nearly twice the other's is a gap that two arms of one spread show often at 5 seeds."""
    from scipy.stats import f as f_distribution

    es_df, grpo_df = len(es.runs) - 1, len(grpo.runs) - 1
    es_var, grpo_var = es.std ** 2, grpo.std ** 2
    if es_var == grpo_var == 0:
        return 1.0, 1.0, 1.0
    if es_var == 0:  # no spread at all against some: no F value needed
        return float("inf"), 0.0, 1.0
    if grpo_var == 0:
        return 0.0, 1.0, 0.0
    ratio = grpo_var / es_var
    return ratio, float(f_distribution.sf(ratio, grpo_df, es_df)), float(f_distribution.sf(1 / ratio, es_df, grpo_df))


def spread_row(task: str, es: Arm, grpo: Arm, moved: str) -> str:
    """One row of 'ES varies less from seed to seed': 'held' or 'did not hold' only once every planned seed is in
    and a one-sided F test rejects equal spreads at SPREAD_LEVEL; otherwise 'not separated'."""
    compared = "; ".join(f"{item.label} std {item.std:.1f}, {seeds_text(item)}" if item.std is not None else
                         f"{item.label}, {seeds_text(item)}" for item in (es, grpo))
    if any(len(item.runs) < item.planned for item in (es, grpo)):
        verdict = "not every seed in yet"
    else:  # every planned seed in: the F test, judged only where the scored budget cut neither arm's answers
        ratio, p_less, p_more = spread_test(es, grpo)
        compared += f"; variance ratio {ratio:.2f}, F test p = {min(p_less, p_more):.2f}"
        verdict = ("open: the scored budget cut answers" if cut_text(es) or cut_text(grpo) else
                   "held" if p_less < SPREAD_LEVEL else "did not hold" if p_more < SPREAD_LEVEL else "not separated")
    return (f"| ES varies less from seed to seed (ES at Scale), {TASK_NAMES[task]}, {moved} | {compared} | "
            f"{verdict} |")


def spread_answer(results: Path = STUDY) -> str:
    """The current answer to "does ES vary less from seed to seed than GRPO?" on 2-digit addition: the two matched
    pairs (every weight; the same adapter), each with its F test."""
    parts, lower, separated = [], [], []
    for es_method, grpo_method in (("full_es", "grpo_full"), ("es_lora", "grpo_lora")):
        es, grpo = arm(results, "arithmetic", es_method), arm(results, "arithmetic", grpo_method)
        if es.std is None or grpo.std is None:
            parts.append(f"{es.label} against {grpo.label}: not every seed in yet")
            continue
        _, p_less, p_more = spread_test(es, grpo)
        parts.append(f"{es.label} std {es.std:.1f} against {grpo.label} {grpo.std:.1f} points "
                     f"(F test p = {min(p_less, p_more):.2f})")
        lower.append("ES" if es.std < grpo.std else "GRPO")
        separated.append(min(p_less, p_more) < SPREAD_LEVEL)
    if not lower:
        return "not every seed in yet"
    who = (f"{lower[0]}'s spread was the lower in both pairs" if len(set(lower)) == 1 and len(lower) == 2
           else f"the lower spread: {', '.join(lower)}")
    tested = ("separated by the F test in both" if all(separated) else "separated by the F test in neither"
              if not any(separated) else "separated by the F test in one")
    return (f"on 2-digit addition, matched (tuned alike, equal training time, 48 tokens): {'; '.join(parts)}: "
            f"{who}, {tested} ({SPREAD_LEVEL:g} level)")
