"""The OpenMP setting a CPU-clock run needs, made before torch loads OpenMP (console_main calls it first)."""

from __future__ import annotations

from ..config.files import read_config_values
from ..errors import EvotuneError
from .parser import build_parser


def quiet_openmp_for_cpu_clock(argv: list[str]) -> None:
    """A run whose budget counts CPU seconds (`training_clock: cpu`, in its config or a --set) gets
    OMP_WAIT_POLICY=PASSIVE unless the environment sets it: OpenMP's idle threads otherwise spin, and beside one busy
    neighbour the same matmuls took 2.1x the CPU seconds (bench/results/speed/omp_wait_policy.json), so the budget
    bought half the work. Must run before torch is imported. An unreadable config is left to the command's own error."""
    import contextlib
    import io
    import os

    if "OMP_WAIT_POLICY" in os.environ:
        return
    try:  # silently: --help, --version and a bad flag print once, from main()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(argv)
        if args.subcommand not in ("train", "grpo", "sweep"):
            return
        values, _ = read_config_values(getattr(args, "config", None), getattr(args, "set", None) or [])
    except (EvotuneError, SystemExit, OSError, ValueError):
        return
    if values.get("training_clock") == "cpu":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
