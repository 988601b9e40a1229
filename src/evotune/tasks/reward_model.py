"""Rewards from a learned reward model (TRL's convention), e.g. ArmoRM on HelpSteer2 prompts.

Qiu et al. and ESSA score open-ended prompts with a reward model. Any sequence-classification
model works: the prompt and completion are joined as a conversation with the reward model's
own chat template (plain text when it has none), scored in batches, and the first logit is the
reward (TRL's RewardTrainer convention). Models whose output carries a `score` field (ArmoRM's
custom head, loaded with `trust_remote_code`) use that instead.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import Task, completion_text
from .data import load_prompt_rows, split_rows


class RewardModelScorer:
    """A reward function with TRL's signature backed by a sequence-classification model.

    Loaded lazily on first call, so building a task (e.g. to validate a config) costs nothing.
    """

    def __init__(self, model: str, batch_size: int = 8, device: str = "cpu", dtype: str = "float32",
                 trust_remote_code: bool = False, max_length: int = 2048):
        self.model_name = model
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.trust_remote_code = trust_remote_code
        self.max_length = max_length
        self.model = None
        self.tokenizer = None
        self.__name__ = f"reward_model({model})"

    def load(self) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_name, trust_remote_code=self.trust_remote_code)
            self.model = AutoModelForSequenceClassification.from_pretrained(
                self.model_name, torch_dtype=getattr(torch, self.dtype), trust_remote_code=self.trust_remote_code)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"reward model {self.model_name!r} could not be loaded as a sequence-classification "
                              f"model ({type(exc).__name__}: {str(exc)[:200]}); give a local directory or a cached "
                              "hub id (set `trust_remote_code: true` in task_args for custom heads "
                              "like ArmoRM).") from exc
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side = "right"
        self.model.to(self.device).eval()

    def _text(self, prompt: Any, completion: Any) -> str:
        messages = (list(prompt) if not isinstance(prompt, str) else [{"role": "user", "content": prompt}])
        messages = messages + [{"role": "assistant", "content": completion_text(completion)}]
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        import torch

        if self.model is None:
            self.load()
        texts = [self._text(p, c) for p, c in zip(prompts, completions)]
        scores: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                       truncation=True, max_length=self.max_length, add_special_tokens=False)
                output = self.model(**{key: value.to(self.device) for key, value in batch.items()})
                score = getattr(output, "score", None)
                values = score if score is not None else output.logits[:, 0]  # (batch,)
                scores.extend(float(v) for v in values.float().view(-1).tolist())
        return scores


def build_reward_model(*, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
                       eval_dataset: str | None = None, reward_model: str | None = None, batch_size: int = 8,
                       device: str = "cpu", trust_remote_code: bool = False) -> Task:
    """Prompts from `dataset` (a `prompt` column, string or chat), scored by `reward_model` (task_args)."""
    if not reward_model:
        raise ConfigError("task `reward_model` needs the scorer: set `task_args: {reward_model: PATH_OR_HUB_ID}` "
                          "(any AutoModelForSequenceClassification, e.g. an ArmoRM or a TRL RewardTrainer output).")
    if not dataset:
        raise ConfigError("task `reward_model` needs `dataset`: a JSONL/CSV/parquet file (or Hub name) with a "
                          "`prompt` column, e.g. HelpSteer2 prompts.")
    rows, evaluation = load_prompt_rows(dataset, eval_dataset)
    rows, evaluation = split_rows(rows, evaluation, num_eval, seed, "reward_model")
    scorer = RewardModelScorer(reward_model, batch_size=batch_size, device=device,
                               trust_remote_code=trust_remote_code)
    return Task(name="reward_model", train_rows=rows, eval_rows=evaluation, reward_fns=[scorer], reward_weights=[1.0])

