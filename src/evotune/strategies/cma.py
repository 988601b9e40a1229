"""CMA-ES through pycma (Hansen et al.), the search strategy of ESSA
(Korotyshova, Shaposhnikov et al., "ESSA: Evolutionary Strategies for Scalable Alignment").

Candidates are absolute points of a small vector space (e.g. singular-value offsets).
pycma minimizes, so rewards are negated here and nowhere else. The sampling noise of an
iteration comes from a generator seeded by (seed, iteration), so any worker holding the
same state regenerates the same population; the whole pycma object is the resumable state.

That state is saved as data, never pickled: a checkpoint is a file users pass around, and
unpickling one runs whatever code it names. `pycma_state` walks the pycma object and writes its
numbers (mean, sigma, the sampler's C/B/D or diagonal scaling, the evolution paths ps and pc,
counters, best-so-far, fitness history) as JSON; resuming builds a fresh object from the same
constructor arguments and writes those numbers back into it, so the run continues bit for bit.
"""

from __future__ import annotations

import base64
import keyword
from typing import Any

import numpy as np

from ..errors import EvotuneError
from ..seeds import derive_seed
from ..types import MeanUpdate
from .base import Strategy


class SeededNormal:
    """pycma's `randn` option: standard normals from a generator re-seeded at every ask().

    A class, not a lambda, so the pycma object (which keeps its options) stays picklable for
    in-process copies; checkpoints never pickle it (see `pycma_state`). Its generator needs no
    saving: it is re-seeded from (seed, iteration) at every ask().
    """

    def __init__(self, seed: int):
        self.seed = seed
        self.generator = np.random.default_rng(seed)

    def reseed(self, iteration: int) -> None:
        self.generator = np.random.default_rng(derive_seed(self.seed, "cma", iteration))

    def __call__(self, *shape: int) -> np.ndarray:
        return self.generator.standard_normal(shape)


class CMAES(Strategy):
    """ESSA's strategy: pycma's CMA-ES (full covariance, or separable with `diagonal`) over a small vector;
    members are absolute points, `tell` emits the new mean as a MeanUpdate."""

    @classmethod
    def from_config(cls, config: Any, space: Any) -> CMAES:
        """The run's CMA-ES (registry entry `cma`): it owns the mean and starts where the space is (zero offsets)."""
        return cls(config.population_size, config.sigma, initial_mean=space.mean_vector(),
                   diagonal=config.cma_diagonal, seed=config.seed)

    def __init__(self, population_size: int, sigma: float, dimension: int | None = None,
                 initial_mean: np.ndarray | None = None, diagonal: bool = False, seed: int = 0):
        super().__init__(population_size, "none", seed)  # CMA-ES ranks internally
        import cma

        if initial_mean is None:
            if not dimension:
                raise ValueError("CMAES needs `dimension` or `initial_mean`")
            initial_mean = np.zeros(dimension)
        self.sigma = sigma
        self.randn = SeededNormal(seed)
        options = {"popsize": population_size, "randn": self.randn, "verbose": -9,
                   "CMA_diagonal": diagonal, "tolfun": 0, "tolx": 0, "tolfunhist": 0, "tolstagnation": 10**9}
        self.es = cma.CMAEvolutionStrategy(np.asarray(initial_mean, dtype=np.float64), sigma, options)

    @property
    def mean(self) -> np.ndarray:
        return np.array(self.es.mean, dtype=np.float64)  # (d,)

    def _ask(self) -> list[np.ndarray]:
        self.randn.reseed(self.iteration)
        return [np.asarray(x) for x in self.es.ask()]  # pop x (d,)

    def _tell(self, shaped: np.ndarray, rewards: np.ndarray) -> MeanUpdate:
        self.es.tell(self._pending, (-rewards).tolist())  # pycma minimizes: the one sign flip
        return MeanUpdate(self.iteration, self.mean.tolist())  # CMA-ES owns its mean: the space adopts it

    def search_metrics(self) -> dict[str, float]:
        """The step size CMA-ES has adapted to (it starts at `sigma`): shrinking means it converges."""
        return {"strategy/sigma": float(self.es.sigma)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "pycma_state": pycma_state(self.es)}

    def load_state_dict(self, state: dict) -> None:
        if "pycma" in state and "pycma_state" not in state:
            raise EvotuneError("this checkpoint stores its CMA-ES state as a Python pickle (written by an earlier "
                               "evotune), which evotune no longer loads: unpickling a file runs any code it "
                               "names. Start the run again, or resume it with the evotune version that wrote it.")
        super().load_state_dict(state)
        # Onto the fresh object built from the same constructor arguments: its options, its sampler's
        # `randn` (this strategy's generator) and its constants stay; the search state is overwritten.
        restore_pycma_state(self.es, state["pycma_state"])


# pycma attributes that are configuration or environment, not search state: the fresh object built
# from the same constructor arguments already holds them (some hold callables such as `randn`).
_NOT_STATE = frozenset({"opts", "inopts", "inputargs", "logger", "timer", "sp", "sp0"})
# Array dtypes pycma's state uses; an array of any other dtype (e.g. object) is not data.
_DTYPES = frozenset({"<f8", "<f4", "<i8", "<i4", "|b1"})


class _NotData(Exception):
    """A value that is code or an unknown object: left to the fresh pycma object."""


def pycma_state(es: Any) -> dict:
    """The search state of a pycma CMAEvolutionStrategy as JSON-ready data (no pickle, no code)."""
    import cma

    return {"version": cma.__version__, "class": type(es).__name__, "attributes": _encode_object(es, "", {})}


def restore_pycma_state(es: Any, state: dict) -> None:
    """Write `pycma_state(...)` back into `es`, a fresh object built with the same arguments."""
    import cma

    if state.get("version") != cma.__version__:
        raise EvotuneError(f"the checkpoint's CMA-ES state was written with pycma {state.get('version')} but "
                           f"pycma {cma.__version__} is installed; its internal state differs between versions, so "
                           f"resuming would not continue the same run. Install it with `pip install "
                           f"cma=={state.get('version')}` to resume.")
    _decode_object(es, state, "", {})
    if not hasattr(es, "timer") and es.countiter > 0:  # pycma makes its wall-clock timer at the first ask()
        es.timer = cma.utilities.utils.ElapsedWCTime()


def _encode_object(obj: Any, path: str, seen: dict[int, str]) -> dict:
    """Every data attribute of a pycma object; attributes holding code or foreign objects are skipped."""
    encoded = {}
    for name, value in vars(obj).items():
        if path == "" and name in _NOT_STATE:
            continue
        known = dict(seen)
        try:
            encoded[name] = _encode(value, f"{path}.{name}", seen)
        except _NotData:  # e.g. the sampler's `randn`: the fresh object's own is the right one
            seen.clear()
            seen.update(known)  # nothing inside a skipped attribute may be the target of a later __ref__
    return encoded


def _encode(value: Any, path: str, seen: dict[int, str]) -> Any:
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if np.isfinite(value) else {"__float__": repr(value)}  # strict JSON: no Infinity/NaN
    if isinstance(value, np.generic) and value.dtype.str in _DTYPES:
        return {"__scalar__": value.dtype.str, "value": _encode(value.item(), path, seen)}
    mutable = isinstance(value, (np.ndarray, list, dict)) or _is_pycma_object(value)
    if mutable and id(value) in seen:  # pycma aliases some arrays (es.C is es.sm.C): keep them one object
        return {"__ref__": seen[id(value)]}
    if isinstance(value, np.ndarray):
        if value.dtype.str not in _DTYPES:
            raise _NotData(path)
        seen[id(value)] = path
        # Raw bytes, exact by construction and a third of the size of decimal text for a d x d covariance.
        return {"__array__": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode(),
                "dtype": value.dtype.str, "shape": list(value.shape)}
    if type(value) is range:  # e.g. which solutions are selective mirrors: tell() weighs them differently
        return {"__range__": [value.start, value.stop, value.step]}
    if type(value) is tuple:
        return {"__tuple__": [_encode(item, f"{path}[{i}]", seen) for i, item in enumerate(value)]}
    if type(value) is list:
        seen[id(value)] = path
        return [_encode(item, f"{path}[{i}]", seen) for i, item in enumerate(value)]
    if type(value) is dict:
        seen[id(value)] = path
        return {"__dict__": [[_encode(key, path, {}), _encode(item, f"{path}[{i}]", seen)]
                             for i, (key, item) in enumerate(value.items())]}
    if _is_pycma_object(value):
        seen[id(value)] = path
        return {"__object__": type(value).__name__, "attributes": _encode_object(value, path, seen)}
    raise _NotData(path)


def _is_pycma_object(value: Any) -> bool:
    return (type(value).__module__.split(".")[0] == "cma" and hasattr(value, "__dict__")
            and not isinstance(value, (dict, list, type)) and not callable(value))


def _decode_object(target: Any, encoded: dict, path: str, registry: dict[str, Any]) -> None:
    """Overwrite `target`'s attributes in place; sub-objects must already exist with the same class."""
    if type(target).__name__ != encoded.get("__object__", encoded.get("class")):
        raise EvotuneError(f"the checkpoint's CMA-ES state does not match this strategy at `{path or 'es'}` "
                           f"({encoded.get('__object__', encoded.get('class'))} vs {type(target).__name__}); was "
                           "the run started with other `strategy` options (e.g. cma_diagonal)?")
    registry[path] = target
    for name, value in encoded["attributes"].items():
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
            raise EvotuneError(f"the checkpoint's CMA-ES state has an invalid attribute name {name!r}; it was "
                               "not written by evotune.")
        child = f"{path}.{name}"
        if isinstance(value, dict) and "__object__" in value:
            _decode_object(getattr(target, name, None), value, child, registry)
        else:
            setattr(target, name, _decode(value, child, registry))


def _decode(value: Any, path: str, registry: dict[str, Any]) -> Any:
    """Data only: numbers, strings, lists, tuples, dicts and numeric arrays; nothing is imported or called."""
    if isinstance(value, list):
        decoded = registry[path] = []
        decoded.extend(_decode(item, f"{path}[{i}]", registry) for i, item in enumerate(value))
        return decoded
    if not isinstance(value, dict):
        return value
    if "__ref__" in value:
        return registry[value["__ref__"]]
    if "__float__" in value:
        return float(value["__float__"])  # 'inf', '-inf' or 'nan': float() parses exactly these
    if "__scalar__" in value:
        return np.dtype(_checked_dtype(value["__scalar__"])).type(value["value"])
    if "__array__" in value:
        array = np.frombuffer(base64.b64decode(value["__array__"]), dtype=np.dtype(_checked_dtype(value["dtype"])))
        decoded = registry[path] = array.reshape(value["shape"]).copy()  # writable: pycma updates in place
        return decoded
    if "__range__" in value:
        start, stop, step = (int(number) for number in value["__range__"])
        return range(start, stop, step)
    if "__tuple__" in value:
        return tuple(_decode(item, f"{path}[{i}]", registry) for i, item in enumerate(value["__tuple__"]))
    if "__dict__" in value:
        decoded = registry[path] = {}
        for i, (key, item) in enumerate(value["__dict__"]):
            decoded[_decode(key, path, {})] = _decode(item, f"{path}[{i}]", registry)
        return decoded
    raise EvotuneError(f"the checkpoint's CMA-ES state has an unknown entry at `{path}`; it was not written by "
                       "evotune.")


def _checked_dtype(dtype: str) -> str:
    if dtype not in _DTYPES:
        raise EvotuneError(f"the checkpoint's CMA-ES state has an array of dtype {dtype!r}; only numeric arrays "
                           "are accepted.")
    return dtype
