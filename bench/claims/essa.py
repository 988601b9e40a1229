"""Claims of the ESSA studies: SFT then CMA-ES, its levers, GSM8K, and INT8/INT4 bases."""

from __future__ import annotations

from collections.abc import Callable

from bench.claims._common import load, pct, premise, relation, seeds_text
from bench.claims.speed import PRECISIONS


def _stage(row: dict, method: str) -> float:
    return row[method]["at_budget"]["value"]


def essa_vs_grpo_arithmetic() -> str:
    data = load("essa/stages_essa_vs_grpo_arithmetic.json")
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    budget = f"{data['budget_time_s']:,.0f} s"
    return (f"SFT {seeds_text(row['sft']['value'] for row in rows)} -> ESSA "
            f"{seeds_text(_stage(row, 'essa') for row in rows)} (seeds {' / '.join(str(r['seed']) for r in rows)}), "
            f"GRPO from the same adapter {seeds_text(_stage(row, 'grpo') for row in rows)} at {budget}, "
            f"n = {data['num_eval']}")


def essa_example() -> str:
    default = sorted(load("essa/essa_arithmetic.json")["runs"], key=lambda run: run["seed"])
    wider = sorted(load("essa/essa_arithmetic_sigma0.1.json")["runs"], key=lambda run: run["seed"])
    iterations = default[0]["curve"][-1][0]
    return (f"{iterations} CMA-ES iterations then give {seeds_text(run['essa'] for run in default)} at sigma 0.02 and "
            f"{seeds_text(run['essa'] for run in wider)} at sigma 0.1")


def _lever_rows(name: str) -> list[dict]:
    return load(f"essa/essa_levers/{name}.json")["rows"]


def essa_levers_sigma() -> str:
    rows = _lever_rows("sigma")
    return (f"start {pct(rows[0]['start_mean'])}: relative sigma "
            + ", ".join(f"{row['sigma']} -> {pct(row['final_mean'])}" for row in rows))


def essa_levers_more() -> str:
    diagonal, population = _lever_rows("diagonal")[0], _lever_rows("population")[0]
    openes, reward, prompts = _lever_rows("openes"), _lever_rows("reward")[0], _lever_rows("prompts")[0]
    rows = [diagonal, population, reward, prompts, *openes, *_lever_rows("sigma")]
    best = max(row["final_mean"] - row["start_mean"] for row in rows)
    return (f"separable CMA-ES (`cma_diagonal`) {pct(diagonal['final_mean'])}, OpenES lr "
            f"{' / '.join(str(row['learning_rate']) for row in openes)} "
            f"{seeds_text(row['final_mean'] for row in openes)}, "
            f"partial credit per digit as the fitness {pct(reward['final_mean'])}, 16 members x "
            f"{prompts['batch_size']} prompts {pct(prompts['final_mean'])}, ESSA-size population "
            f"{population['population_size']} x 4 prompts for {population['time_s_mean']:.0f} s "
            f"{pct(population['final_mean'])}: the best ({100 * best:+.1f} points)")


def essa_tuned_test() -> str:
    runs = sorted((run for run in load("essa/compare_essa_tuned_vs_grpo_arithmetic/compare.json")["runs"]
                   if "essa" in run["run"].rsplit("/", 1)[-1]), key=lambda run: run["seed"])
    return (" and ".join(f"{pct(run['curve'][0]['value'])} -> {pct(run['final'])}" for run in runs)
            + f" (seeds {' / '.join(str(run['seed']) for run in runs)})")


def adapter_scale() -> str:
    runs = [load(f"essa/adapter_scale_arithmetic_seed{seed}.json")["points"] for seed in (0, 1)]
    parts = []
    for index in (1, 2):
        changes = " / ".join(f"{100 * (points[index]['train_accuracy'] - points[0]['train_accuracy']):+.1f}"
                             for points in runs)
        parts.append(f"x{runs[0][index]['adapter_scale']:.2f} -> {changes} points")
    return ", ".join(parts) + " (seeds 0 / 1)"


def _heatmap_rows() -> list[dict]:
    return load("essa/essa_heatmap/sweep.json")["rows"]


def essa_heatmap() -> str:
    rows = _heatmap_rows()
    starts = {}
    for row in rows:
        starts.setdefault(int(row["adapter"].split("sft-rank")[1].split("/")[0]), row["start_mean"])
    ranks = sorted(starts)

    def moves(population):
        changes = [100 * (row["final_mean"] - row["start_mean"])
                   for row in rows if row["population_size"] == population]
        return f"{min(changes):+.1f}..{max(changes):+.1f} points"
    return (f"SFT at rank {' / '.join(map(str, ranks))} gives {seeds_text(starts[rank] for rank in ranks)}; "
            f"{min(row['time_s_mean'] for row in rows):.0f}-{max(row['time_s_mean'] for row in rows):.0f} s of CMA-ES "
            f"then moves it by {moves(16)} (population 16) and {moves(48)} (population 48)")


def essa_in_sum() -> str:
    rows = [*_heatmap_rows(), *(row for name in ("sigma", "diagonal", "openes", "reward", "prompts", "population")
                                for row in _lever_rows(name))]
    changes = [100 * (row["final_mean"] - row["start_mean"]) for row in rows]
    stages = sorted(load("essa/stages_essa_vs_grpo_arithmetic.json")["rows"], key=lambda row: row["seed"])
    grpo = " / ".join(f"{100 * (_stage(row, 'grpo') - row['sft']['value']):+.1f}" for row in stages)
    budget = load("essa/stages_essa_vs_grpo_arithmetic.json")["budget_time_s"]
    return (f"moved accuracy by {min(changes):+.1f} to {max(changes):+.1f} points; GRPO continuing the same adapter "
            f"for {budget:.0f} s moved it {grpo} points")


def essa_gsm8k() -> str:
    data = load("essa_gsm8k/stages_essa_gsm8k.json")
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    return (f"base {seeds_text(row['base']['value'] for row in rows)}, after SFT "
            f"{seeds_text(row['sft']['value'] for row in rows)}, "
            f"ESSA {seeds_text(row['essa']['final']['value'] for row in rows)}, "
            f"GRPO {seeds_text(row['grpo']['final']['value'] for row in rows)} (seeds 0 / 1, n = {data['num_eval']})")


def essa_quantization() -> str:
    means = load("essa_quantization/essa_quantization.json")["mean_over_seeds"]
    order = ("float32", "int8", "int4")
    gains = " / ".join(f"{100 * (means[p]['essa_end'] - means[p]['sft_alone']):+.1f}" for p in order)
    return (f"the SFT adapter alone scores {' / '.join(pct(means[p]['sft_alone']) for p in order)} "
            f"on float32 / INT8 / INT4, and ESSA ends at {' / '.join(pct(means[p]['essa_end']) for p in order)} "
            f"({gains} points; mean of 2 seeds, n = 512 at 10 tokens)")


def quantization_speed() -> str:
    data = load("essa_quantization/quantization_speed_128prompts.json")
    time, memory, equal = data["time"], data["memory"], data["completions_equal_to_float32"]
    peaks = " / ".join(f"{memory[precision]['peak_rss_generating_mib']:.0f}"
                       for precision in ("float32", "int8", "int4"))
    return (f"float32 took {time['float32']['wall_s']:.1f} s, INT8 {time['int8']['wall_s_ratio_to_float32']:.2f}x and "
            f"INT4 {time['int4']['wall_s_ratio_to_float32']:.2f}x that; peak RSS {peaks} MiB; "
            f"{equal['int8']} and {equal['int4']} of {equal['float32']} completions equal to float32's")


def essa_sft_arithmetic() -> str:
    runs = load("essa/essa_arithmetic.json")["runs"]
    return (f"from {' / '.join(pct(run['base']) for run in runs)} to {' / '.join(pct(run['sft']) for run in runs)} "
            f"(seeds {' / '.join(str(run['seed']) for run in runs)})")


def _profile_share(name: str, precision: str, *ops: str) -> float:
    return sum(row["share"] for row in load(name)["profile_top_ops"][precision] if row["op"] in ops)


def quantization_profile() -> str:
    """Where one generate's CPU time goes (torch.profiler's top ops), at 16 and at 128 prompts."""
    small, large = "essa_quantization/quantization_speed.json", "essa_quantization/quantization_speed_128prompts.json"
    activation = _profile_share(large, "int8", "aten::mul", "aten::copy_", "aten::max", "aten::cat")
    int8_matmul = _profile_share(large, "int8", "aten::_int_mm")
    seconds = load(small)["time"]
    int4_speed = relation(seconds["int4"]["wall_s"], seconds["float32"]["wall_s"], "slower than", "faster than",
                          "as fast as")
    return (f"float32 spends {_profile_share(small, 'float32', 'aten::mm'):.0%} in `aten::mm`; INT4 "
            f"{_profile_share(small, 'int4', 'bitsandbytes::gemv_4bit'):.0%} in `bitsandbytes::gemv_4bit`, "
            f"{int4_speed} float32's MKL matmul here ({seconds['int4']['wall_s']:.2f} s against "
            f"{seconds['float32']['wall_s']:.2f} s a generate); INT8 spreads it over `_int_mm` "
            f"({_profile_share(small, 'int8', 'aten::_int_mm'):.0%}), quantizing the activations (mul, copy, "
            f"`MatMul8bitLt`) and the float32 LM head and adapter (`aten::mm`); at 128 prompts the activation "
            f"quantization (`mul`, `copy_`, `max`, `cat`: {activation:.0%}) "
            f"{relation(activation, int8_matmul, 'outweighs', 'takes less than', 'matches', 0.1)} the INT8 matmul "
            f"itself ({int8_matmul:.0%}), and INT4's kernel takes "
            f"{_profile_share(large, 'int4', 'bitsandbytes::gemv_4bit'):.0%}")


def quantization_memory() -> str:
    memory = load("essa_quantization/quantization_speed.json")["memory"]
    weights = {precision: memory[precision]["base_memory_footprint_mib"] for precision in memory}
    returned = {precision: values["rss_after_load_and_warm_up_mib"] - values["rss_after_malloc_trim_mib"]
                for precision, values in memory.items()}
    resident = {precision: values["rss_after_malloc_trim_mib"] for precision, values in memory.items()}
    premise(min(resident["int8"], resident["int4"]) >= resident["float32"], "quantization-memory",
            "a quantized process holds no less memory than float32's")
    return (f"The weights shrink {weights['float32'] / weights['int8']:.1f}x / "
            f"{weights['float32'] / weights['int4']:.1f}x (embeddings and tied head stay float32), yet for this small "
            f"model the process's RSS does not ({resident['float32']:,.0f} MiB float32, {resident['int8']:,.0f} INT8, "
            f"{resident['int4']:,.0f} INT4): the quantized processes read float32 weights and quantize them, and "
            f"glibc keeps much of what was freed (`malloc_trim` after loading returned {returned['int8']:.0f} MiB for "
            f"INT8, {returned['int4']:.0f} MiB for INT4, {returned['float32']:.0f} MiB for float32)")


def quantization_sft_cost() -> str:
    means = load("essa_quantization/essa_quantization.json")["mean_over_seeds"]
    cost = {precision: 100 * (means["float32"]["sft_alone"] - means[precision]["sft_alone"])
            for precision in ("int8", "int4")}
    share = means["int4"]["sft_alone"] / means["float32"]["sft_alone"]
    return (f"INT8 costs the float32-trained adapter {cost['int8']:.1f} points, INT4 {cost['int4']:.0f} points "
            f"(it keeps {share:.0%} of its accuracy)")


def quantization_ratios() -> str:
    time = load("essa_quantization/quantization_speed_128prompts.json")["time"]
    return (f"INT8 {time['int8']['wall_s_ratio_to_float32']:.2f}x, INT4 {time['int4']['wall_s_ratio_to_float32']:.2f}x "
            "float32 at 128 prompts")


def quantization_speed_table() -> str:
    """One generate of 16 prompts per base precision: time, weights, peak RSS, completions equal to float32's."""
    data = load("essa_quantization/quantization_speed.json")
    time, memory, equal = data["time"], data["memory"], data["completions_equal_to_float32"]
    lines = ["", "", "| base | generation (median) | / float32 | weights (`get_memory_footprint`) "
             "| peak RSS generating | completions = float32's |", "|---|---|---|---|---|---|"]
    for key, label in PRECISIONS.items():
        lines.append(f"| {label} | {time[key]['wall_s']:.2f} s | {time[key]['wall_s_ratio_to_float32']:.2f} "
                     f"| {memory[key]['base_memory_footprint_mib']:.0f} MiB "
                     f"| {memory[key]['peak_rss_generating_mib']:.0f} MiB "
                     f"| {equal[key]} / {equal['float32']} |")
    return "\n".join(lines) + "\n\n"


def essa_quantization_table() -> str:
    """Per base precision and seed: the SFT adapter alone, ESSA's end, the gain, peak RSS, seconds per iteration."""
    data = load("essa_quantization/essa_quantization.json")
    rows = sorted(data["rows"], key=lambda row: (list(PRECISIONS).index(row["precision"]), row["seed"]))

    def cell(entry: dict) -> str:
        low, high = entry["ci95"]
        return f"{pct(entry['value'])} [{100 * low:.1f}, {100 * high:.1f}]"

    iterations = {row["essa"]["iterations"] for row in rows}
    lines = ["", "", f"| base | seed | SFT adapter alone "
             f"| ESSA end ({'/'.join(map(str, sorted(iterations)))} iterations) "
             "| ESSA gain | peak RSS | median s / iteration |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        essa = row["essa"]
        gain = 100 * (essa["end"]["value"] - row["sft_alone"]["value"])
        lines.append(f"| {PRECISIONS[row['precision']]} | {row['seed']} | {cell(row['sft_alone'])} "
                     f"| {cell(essa['end'])} "
                     f"| {gain:+.1f} | {essa['peak_rss_mib']:.0f} MiB | {essa['seconds_per_iteration']} |")
    return "\n".join(lines) + "\n\n"


CLAIMS: dict[str, Callable[[], str]] = {
    "essa-vs-grpo-arithmetic": essa_vs_grpo_arithmetic,
    "essa-example": essa_example,
    "essa-levers-sigma": essa_levers_sigma,
    "essa-levers-more": essa_levers_more,
    "essa-tuned-test": essa_tuned_test,
    "adapter-scale": adapter_scale,
    "essa-heatmap": essa_heatmap,
    "essa-in-sum": essa_in_sum,
    "essa-quantization": essa_quantization,
    "essa-quantization-table": essa_quantization_table,
    "quantization-speed": quantization_speed,
    "quantization-speed-table": quantization_speed_table,
    "essa-gsm8k": essa_gsm8k,
    "essa-sft-arithmetic": essa_sft_arithmetic,
    "quantization-profile": quantization_profile,
    "quantization-memory": quantization_memory,
    "quantization-sft-cost": quantization_sft_cost,
    "quantization-ratios": quantization_ratios,
}
