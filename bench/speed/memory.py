"""Peak RSS during ES training divided by the RSS of the loaded model alone.

The model is loaded (GGUF dequantization peaks high, so the peak counter is reset
afterwards), its steady RSS is read, then the space (with its fp32 host master copy)
is built and training iterations run; the peak is read at the end. The master copy is
reported separately, as the issue asks.

    python -m bench.speed.memory --iterations 2
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile

from bench.common import peak_rss_bytes, reset_peak_rss, rss_bytes, write_result
from evotune.backends import HFBackend  # noqa: E402
from evotune.config import TrainConfig  # noqa: E402
from evotune.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--population-size", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--noise", default="gaussian")
    args = parser.parse_args()

    config = TrainConfig(task="arithmetic", population_size=args.population_size, antithetic=True, sigma=2e-3,
                         learning_rate=4e-3, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                         iterations=args.iterations, dtype=args.dtype, noise=args.noise, report_to=[], num_eval=8)
    backend = HFBackend.load(config.model, config.dtype)
    # Generate once so the model-alone reading includes the runtime's own warm-up allocations.
    backend.generate(["Hello"], 4)
    gc.collect()
    model_rss = rss_bytes()
    reset_peak_rss()
    trainer = Trainer(config, tempfile.mkdtemp(prefix="evotune-mem-"), backend=backend)
    master_bytes = sum(t.numel() * t.element_size() for t in trainer.space.master.values())
    for _ in range(args.iterations):
        trainer.step()
    peak = peak_rss_bytes()
    mib = 1024 * 1024
    write_result(f"memory_{args.dtype}_{args.noise}", {
        "command": "python -m bench.speed.memory " + " ".join(sys.argv[1:]),
        "model": config.model, "dtype": config.dtype, "noise": config.noise,
        "population_size": config.population_size, "batch_size": config.batch_size,
        "model_alone_rss_mib": round(model_rss / mib, 1),
        "training_peak_rss_mib": round(peak / mib, 1),
        "host_master_copy_mib": round(master_bytes / mib, 1),
        "ratio_excluding_master_copy": round((peak - master_bytes) / model_rss, 3),
        "ratio_including_master_copy": round(peak / model_rss, 3),
    }, study="speed")


if __name__ == "__main__":
    main()
