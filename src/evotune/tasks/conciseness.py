"""Conciseness: short-answer questions rewarded by how close the answer's length is to the solution's.

The reward, ``-abs(len(completion) - len(solution))`` in characters, is the conciseness task of
Qiu et al. 2025, "Evolution Strategies at Scale: LLM Fine-Tuning Beyond Reinforcement Learning"
(arXiv 2509.24372), used there to study reward hacking and behaviour drift: the reward sees only
length, so the "exact" and "contains_solution" metrics show whether the model stays correct while
it learns to be brief. The prompts carry no length instruction on purpose. The questions are built
in code (no download) from the tables below.
"""

from __future__ import annotations

import random
from typing import Any

from ..errors import ConfigError
from .base import Task, completion_text

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens",
    "Canada": "Ottawa", "Australia": "Canberra", "Ireland": "Dublin", "Norway": "Oslo", "Sweden": "Stockholm",
    "Finland": "Helsinki", "Denmark": "Copenhagen", "Poland": "Warsaw", "Austria": "Vienna", "Hungary": "Budapest",
    "Peru": "Lima", "Chile": "Santiago", "Argentina": "Buenos Aires", "Kenya": "Nairobi", "Thailand": "Bangkok",
    "South Korea": "Seoul", "Cuba": "Havana", "Turkey": "Ankara", "Belgium": "Brussels", "the Netherlands": "Amsterdam",
    "Mexico": "Mexico City", "India": "New Delhi", "the United Kingdom": "London", "Iceland": "Reykjavik",
    "Czechia": "Prague",
}
OPPOSITES = {
    "hot": "cold", "up": "down", "big": "small", "fast": "slow", "happy": "sad", "light": "dark", "open": "closed",
    "early": "late", "full": "empty", "hard": "soft", "high": "low", "old": "new", "rich": "poor", "strong": "weak",
    "wet": "dry", "thick": "thin", "loud": "quiet", "left": "right", "true": "false", "win": "lose", "push": "pull",
    "day": "night", "inside": "outside", "buy": "sell", "begin": "end", "heavy": "light", "long": "short",
    "north": "south", "east": "west", "above": "below",
}
SYMBOLS = {
    "hydrogen": "H", "helium": "He", "carbon": "C", "nitrogen": "N", "oxygen": "O", "sodium": "Na",
    "magnesium": "Mg", "aluminium": "Al", "silicon": "Si", "phosphorus": "P", "sulfur": "S", "chlorine": "Cl",
    "potassium": "K", "calcium": "Ca", "iron": "Fe", "copper": "Cu", "zinc": "Zn", "silver": "Ag", "gold": "Au",
    "lead": "Pb", "mercury": "Hg", "tin": "Sn", "neon": "Ne", "uranium": "U", "iodine": "I",
}
PLURALS = {
    "mouse": "mice", "child": "children", "foot": "feet", "tooth": "teeth", "goose": "geese", "man": "men",
    "woman": "women", "person": "people", "ox": "oxen", "cactus": "cacti", "leaf": "leaves", "knife": "knives",
    "wolf": "wolves", "box": "boxes", "city": "cities", "baby": "babies", "potato": "potatoes", "sheep": "sheep",
    "fish": "fish", "deer": "deer", "bus": "buses", "life": "lives", "half": "halves", "analysis": "analyses",
    "crisis": "crises",
}
COLORS = {
    "a ripe banana": "yellow", "grass": "green", "a clear daytime sky": "blue", "snow": "white", "coal": "black",
    "a ripe tomato": "red", "a carrot": "orange", "chocolate": "brown", "a flamingo": "pink", "milk": "white",
    "an emerald": "green", "a lemon": "yellow",
}
FACTS = {
    "How many days are in a week?": "7", "How many legs does a spider have?": "8",
    "How many continents are there?": "7", "How many sides does a triangle have?": "3",
    "How many minutes are in an hour?": "60", "How many hours are in a day?": "24",
    "How many months are in a year?": "12", "How many legs does an insect have?": "6",
    "How many sides does a hexagon have?": "6", "How many days are in a leap year?": "366",
    "How many planets are in the Solar System?": "8", "How many strings does a standard guitar have?": "6",
    "What is the largest planet in the Solar System?": "Jupiter", "What is the closest star to Earth?": "the Sun",
    "What is the largest ocean on Earth?": "Pacific", "What gas do plants absorb from the air?": "carbon dioxide",
    "What is frozen water called?": "ice", "Which planet is known as the Red Planet?": "Mars",
    "What is the boiling point of water at sea level in degrees Celsius?": "100",
    "What is the freezing point of water in degrees Celsius?": "0", "Who wrote Hamlet?": "Shakespeare",
    "What is the chemical formula of water?": "H2O", "What is the square root of 81?": "9",
    "How many centimeters are in a meter?": "100", "What is the largest mammal?": "blue whale",
    "What is the tallest mountain on Earth?": "Everest", "What is the longest river in Africa?": "Nile",
    "How many players are on a soccer team on the field?": "11", "What is 12 times 12?": "144",
    "What is the hardest natural substance?": "diamond", "What do bees make?": "honey",
    "What is a baby cat called?": "kitten", "What is a baby dog called?": "puppy",
    "What is the first letter of the English alphabet?": "A", "How many letters are in the English alphabet?": "26",
}


def questions() -> list[tuple[str, str]]:
    """Every (question, solution) pair of the dataset, in a fixed order; all questions distinct."""
    pairs = [(f"What is the capital of {country}?", capital) for country, capital in CAPITALS.items()]
    pairs += [(f"What is the opposite of the word '{word}'?", opposite) for word, opposite in OPPOSITES.items()]
    pairs += [(f"What is the chemical symbol for {element}?", symbol) for element, symbol in SYMBOLS.items()]
    pairs += [(f"What is the plural of '{word}'?", plural) for word, plural in PLURALS.items()]
    pairs += [(f"What color is {thing}?", color) for thing, color in COLORS.items()]
    pairs += list(FACTS.items())
    return pairs


def conciseness_reward(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float]:
    """``-abs(len(completion) - len(solution))`` in characters of the stripped completion (max 0)."""
    return [-float(abs(len(completion_text(c).strip()) - len(str(s)))) for c, s in zip(completions, solution)]


def completion_length(completions: list[Any], **kwargs: Any) -> list[float]:
    """Length in characters of each stripped completion."""
    return [float(len(completion_text(c).strip())) for c in completions]


def _normalise(text: str) -> str:
    text = text.strip().lower()
    return text[:-1].rstrip() if text.endswith(".") else text


def exact_match(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the completion (stripped, lower-cased, trailing period removed) is the solution."""
    return [1.0 if _normalise(completion_text(c)) == str(s).strip().lower() else 0.0
            for c, s in zip(completions, solution)]


def contains_solution(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the solution appears (case-insensitively) anywhere in the completion."""
    return [1.0 if str(s).strip().lower() in completion_text(c).lower() else 0.0
            for c, s in zip(completions, solution)]


# Held-out completions at a budget that does not cut them: SmolLM2-135M-Instruct's `contains_solution` on 128
# held-out questions (bench/eval_budget/eval_budget.sh conciseness 128, float32, greedy)
# is 71.1% at 32 new tokens, 74.2% at 64
# and 75.8% at 128 and 256; at 32 the reward also hides how long the answers would run (length 75 vs 131 characters).
EVAL_MAX_NEW_TOKENS = 128


def build_conciseness(*, seed: int = 0, num_eval: int | None = None) -> Task:
    """Seeded shuffle of :func:`questions`; the first ``num_eval`` (default 64) are eval, the rest train."""
    pairs = questions()
    num_eval = 64 if num_eval is None else num_eval
    if not isinstance(num_eval, int) or isinstance(num_eval, bool) or not 0 <= num_eval < len(pairs):
        raise ConfigError(f"conciseness: `num_eval` must be an integer from 0 to {len(pairs) - 1} "
                          f"(the dataset has {len(pairs)} questions), got {num_eval!r}.")
    random.Random(f"conciseness-{seed}").shuffle(pairs)
    rows = [{"prompt": [{"role": "user", "content": q}], "solution": s} for q, s in pairs]
    return Task(name="conciseness", train_rows=rows[num_eval:], eval_rows=rows[:num_eval],
                reward_fns=[conciseness_reward], reward_weights=[1.0],
                metric_fns={"length": completion_length, "exact": exact_match, "contains_solution": contains_solution},
                eval_max_new_tokens=EVAL_MAX_NEW_TOKENS)
