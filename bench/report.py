"""Collect every JSON in bench/results/ into bench/results/README.md (numbers are copied, never typed).

    python bench/report.py
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def learning_rows(data: dict) -> list[str]:
    rows = []
    for run in data["runs"]:
        rows.append(f"| {data['config']} {' '.join(data['command'].split('--set')[1:]) or ''} | {run['seed']} "
                    f"| {run['before']:.4g} | {run['after']:.4g} | {max(v for _, v in run['curve']):.4g} "
                    f"| {run['iteration_time_s_mean']} | {run['wall_time_s']} |")
    return rows


def main() -> None:
    lines = ["# Benchmark results", "", "Written by `python bench/report.py` from the JSON files beside it; each JSON "
             "holds the command that produced it and the machine it ran on.", ""]
    learning = sorted(RESULTS.glob("learning_*.json"))
    if learning:
        lines += ["## Learning (held-out metric before / after ES)", "",
                  "| run | seed | before | after | best | s/iteration | wall s |", "|---|---|---|---|---|---|---|"]
        for path in learning:
            data = json.loads(path.read_text())
            lines += [f"| **{path.stem}** ({data['metric']}) | | | | | | |"] + learning_rows(data)
        lines.append("")
    overhead = sorted(RESULTS.glob("overhead_*.json"))
    if overhead:
        lines += ["## Overhead (ES iteration / plain generation of the same workload, same process)", "",
                  "| noise | task | pop | prompts | tokens | plain gen s | ES iteration s | apply s/candidate | ratio |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for path in overhead:
            d = json.loads(path.read_text())
            lines.append(f"| {d['noise']} | {d['task']} | {d['population_size']} | {d['batch_size']} "
                         f"| {d['max_new_tokens']} | {d['plain_generation_s']} | {d['es_iteration_s']} "
                         f"| {d['apply_one_candidate_s']} | **{d['overhead_ratio_median']}** |")
        lines.append("")
    for path in sorted(RESULTS.glob("memory_*.json")):
        d = json.loads(path.read_text())
        lines += ["## Memory", "", f"`{d['command']}`: model alone {d['model_alone_rss_mib']} MiB RSS, training "
                  f"peak {d['training_peak_rss_mib']} MiB, of which the fp32 host master copy is "
                  f"{d['host_master_copy_mib']} MiB. Ratio without the master copy **{d['ratio_excluding_master_copy']}**"
                  f", with it {d['ratio_including_master_copy']}.", ""]
    (RESULTS / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
