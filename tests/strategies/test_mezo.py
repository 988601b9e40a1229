"""`method: mezo` is MeZO (Malladi et al. 2023, arXiv 2305.17333) made of evotune's parts: one antithetic pair per
step, the raw reward difference (no shaping), SGD, noise replayed from the pair's seed. One step of it must be MeZO's
ZO-SGD step, theta + eta * (r(theta + eps z) - r(theta - eps z)) / (2 eps) * z, with eta = learning_rate * eps."""

from __future__ import annotations

import numpy as np
import torch

from evotune.config import TrainConfig
from evotune.config.methods import METHODS
from evotune.optimizers import make_optimizer
from evotune.spaces import VectorSpace
from evotune.spaces.noise import noise
from evotune.strategies import STRATEGIES

TARGET = np.linspace(-1.0, 1.0, 10)


def reward(x: torch.Tensor) -> float:
    return -float(((x.numpy() - TARGET) ** 2).sum())


def test_a_mezo_step_is_zo_sgd_with_eta_equal_to_learning_rate_times_eps():
    config = TrainConfig(method="mezo", model="smollm2-135m-instruct")
    assert (config.space, config.strategy, config.population_size, config.antithetic, config.fitness_shaping,
            config.optimizer, config.noise) == ("full", "openes", 2, True, "none", "sgd", "gaussian")
    strategy = STRATEGIES[config.strategy].from_config(config, None)
    start = torch.tensor(np.full(10, 0.3), dtype=torch.float32)
    space = VectorSpace(start.numpy().copy(), noise_kind=config.noise,
                        optimizer=make_optimizer(config.optimizer, config.learning_rate))
    plus, minus = strategy.ask()
    assert plus.seed == minus.seed and plus.scale == -minus.scale == config.sigma
    rewards = []
    for candidate in (plus, minus):
        space.apply(candidate)
        rewards.append(reward(space.current))
        space.restore()
    update, _ = strategy.tell(np.array(rewards))
    space.step(update.seeds, update.coefficients)
    eps, eta = config.sigma, config.learning_rate * config.sigma  # MeZO's eps and learning rate
    z = noise((10,), plus.seed, "vector", "gaussian")
    expected = start + eta * (rewards[0] - rewards[1]) / (2 * eps) * z
    torch.testing.assert_close(space.mean, expected, rtol=1e-5, atol=1e-7)
    assert reward(space.mean) > reward(start)  # a small step along the pair's direction climbs the quadratic


def test_mezo_is_named_apart_from_full_es_and_keeps_its_papers_defaults():
    assert TrainConfig.from_dict({"space": "full"}).method == "full-es"  # the making key alone is full-es
    mezo = TrainConfig.from_dict({"method": "mezo"})
    assert (mezo.method, mezo.sigma, mezo.learning_rate, mezo.batch_size) == ("mezo", 1e-3, 1e-3, 16)
    assert all("MeZO" in default.source for default in METHODS["mezo"].defaults.values())
