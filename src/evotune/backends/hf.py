"""Batched greedy generation with transformers.

Prompts follow TRL's two formats: a string is used as is; a list of chat messages
gets the tokenizer's chat template with the generation prompt appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..spaces.lora import LoRAFactor
from . import decoding
from .models import load_model
from .quantized import QuantizationSettings
from .shared_prefix import PrefixSplit, exact_for, generate_after_prefix, split_prompts


def render_prompt(tokenizer: Any, prompt: str | list[dict]) -> str:
    """A prompt as the model reads it: a string as is, chat messages through the tokenizer's chat template
    (with the generation prompt), or joined as plain text for a base model without one."""
    if isinstance(prompt, str):
        return prompt
    if tokenizer.chat_template is None:  # a base model: join the turns as plain text
        return "\n".join(message["content"] for message in prompt) + "\n"
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def _contiguous(module: torch.nn.Module, args: tuple) -> tuple:
    return (args[0].contiguous(), *args[1:])


def contiguous_head_input(model: Any) -> None:
    """Make the LM head's input contiguous before its matmul (idempotent).

    After the prompt step generate() keeps the last position, hidden[:, -1:, :], a strided view.
    When the head's weight does not require grad (PEFT freezes it, as does requires_grad_(False)),
    torch.matmul cannot fold that view into 2-D and instead expands the (vocab, hidden) weight
    once per row and runs a bmm: for SmolLM2 and 64 rows a 3.6 GB copy, which made a PEFT-wrapped
    model generate ~2x slower than the bare one on CPU (measured, torch 2.13). Copying the
    (rows, 1, hidden) input instead costs nothing.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and not getattr(head, "_evotune_contiguous_input", False):
        head.register_forward_pre_hook(_contiguous)
        head._evotune_contiguous_input = True


def bucket_rows(rows: int, limit: int | None = None) -> int:
    """The batch size a compiled generate runs `rows` prompts at: the next power of two, at most `limit` (the
    generation_batch_size, whose full chunks then share one size). A compiled decoding step is captured per batch
    shape, so a call with 3 prompts, or the last, shorter chunk of a generation_batch_size, reuses the graph of a
    few bucket sizes instead of capturing (and on CUDA holding) one graph per size."""
    bucket = 1 << max(rows - 1, 0).bit_length()
    return min(bucket, limit) if limit else bucket


def pad_rows(batch: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """`batch` ((n, width) ids and mask) with its first row repeated to `rows` rows: filler that generates as a
    real row does (a row of padding alone would attend to nothing) and is dropped afterwards."""
    missing = rows - batch["input_ids"].shape[0]
    if missing <= 0:
        return batch
    return {key: torch.cat([value, value[:1].expand(missing, -1)]) for key, value in batch.items()}  # (rows, width)


class HFBackend:
    """Holds one model replica and its tokenizer; generates completions for prompts.

    shared_prefix: compute the token prefix common to a generate call's prompts once and continue every
    row from its KV cache (backends/shared_prefix.py); False: the plain left-padded batch; None: on where
    that gives the same greedy completions, float32 weights (shared_prefix.exact_for).
    compile_generation: decode with a static KV cache and the decoding step compiled by torch.compile
    (transformers' generate: CUDA graphs on CUDA, inductor on a CPU), captured once per batch shape and
    reused across candidates (a candidate's weights are written in place, so their storage, which the
    compiled step reads, stays the same), and across batch sizes: greedy rows are padded up to bucket_rows().
    Plain batches only: a shared prefix or a population-batched forward generates eagerly.
    """

    @classmethod
    def from_config(cls, config: Any, device: str) -> HFBackend:
        """The run's model in this process (registry entry `hf`)."""
        return cls.load(config.model, config.dtype, device, config.generation_batch_size,
                        QuantizationSettings.from_config(config), shared_prefix=config.shared_prefix,
                        compile_generation=bool(config.compile_generation))

    engine_processes = False  # the model lives in this process (a GPU is named by its device)

    @classmethod
    def gpus_per_replica(cls, config: Any) -> float:
        """GPUs one replica's model takes on CUDA: one."""
        return 1.0

    @classmethod
    def population_batch(cls, config: Any, space: Any, model: Any = None) -> int | None:
        """Candidates per batched forward for `space` (its `population_batching`), or None: one at a time. `auto`
        (full copies): as many stacked copies as the free memory of `model`'s device holds (CPU: 1).

        Unset, full-rank candidates are `auto`: on an H200 it gave the same rewards as one at a time, 3.2x faster
        (bench/results/gpu_check/gpu_check_h200.json); a CPU gets 1. Not beside compile_generation or
        prefetch_candidates, which speed up the one-at-a-time loop instead."""
        batch = config.population_batch_size
        if batch is None and config.space == "full" and not (config.compile_generation or config.prefetch_candidates):
            batch = "auto"
        if space.population_batching == "whole":
            return batch or config.population_size
        if space.population_batching != "requested":
            return None
        if batch == "auto":
            from .stacked_weights import auto_population_batch

            return auto_population_batch(model, space.parameters, config.population_size,
                                         config.generation_batch_size or config.batch_size, config.max_new_tokens)
        return batch

    def __init__(self, model: Any, tokenizer: Any, generation_batch_size: int | None = None,
                 shared_prefix: bool | None = None, compile_generation: bool = False):
        contiguous_head_input(model)
        self.model = model
        self.tokenizer = tokenizer
        self.generation_batch_size = generation_batch_size
        self.shared_prefix = shared_prefix
        self.compile_generation = compile_generation
        self._encoded: dict[tuple[str, ...], dict[str, torch.Tensor]] = {}  # the same prompts recur for every candidate
        self._splits: dict[tuple[str, ...], PrefixSplit | None] = {}

    @classmethod
    def load(cls, model: str, dtype: str = "bfloat16", device: str = "cpu",
             generation_batch_size: int | None = None, quantization: str | QuantizationSettings = "none",
             shared_prefix: bool | None = None, compile_generation: bool = False) -> HFBackend:
        return cls(*load_model(model, dtype, device, quantization), generation_batch_size=generation_batch_size,
                   shared_prefix=shared_prefix, compile_generation=compile_generation)

    def _compiled(self) -> dict[str, Any]:
        """generate() keywords for a static cache and a compiled decoding step, or none (eager)."""
        if not self.compile_generation:
            return {}
        from transformers.generation.configuration_utils import CompileConfig

        on_cuda = self.device.type == "cuda"
        config = CompileConfig(mode="reduce-overhead" if on_cuda else "default", dynamic=False)
        config._compile_all_devices = True  # transformers compiles only on accelerators unless told so
        return {"cache_implementation": "static", "compile_config": config}

    def _greedy(self) -> dict[str, Any]:
        """generate() keywords for greedy decoding: no sampling, and where this transformers allows it
        decoding.greedy_decode, generate's own greedy loop without a host sync per new token (same tokens)."""
        greedy = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        return {**greedy, "custom_generate": decoding.greedy_decode} if decoding.supported() else greedy

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _encode(self, texts: tuple[str, ...]) -> dict[str, torch.Tensor]:
        if texts not in self._encoded:
            if len(self._encoded) > 8:
                self._encoded.clear()
            # add_special_tokens=False: chat templates already carry their own BOS/markers.
            batch = self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
            self._encoded[texts] = {key: value.to(self.device) for key, value in batch.items()}
        return self._encoded[texts]

    def _prefix_split(self, texts: tuple[str, ...]) -> PrefixSplit | None:
        """The batch split into its shared token prefix and remainders; None: generate the plain padded batch
        (also with compile_generation, whose static cache holds the whole padded batch)."""
        if self.compile_generation or not (exact_for(self.model) if self.shared_prefix is None else self.shared_prefix):
            return None
        if texts not in self._splits:
            if len(self._splits) > 8:
                self._splits.clear()
            rows = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]  # unpadded id lists
            self._splits[texts] = split_prompts(rows, self.tokenizer.pad_token_id, self.device)
        return self._splits[texts]

    @torch.inference_mode()
    def generate(self, prompts: list[str | list[dict]], max_new_tokens: int, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0) -> list[str]:
        """Completions (decoded new tokens, special tokens removed) for each prompt, in order."""
        texts = [render_prompt(self.tokenizer, prompt) for prompt in prompts]
        step = self.generation_batch_size or len(texts)
        completions: list[str] = []
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if do_sample else self._greedy()
        for start in range(0, len(texts), step):
            chunk = tuple(texts[start:start + step])
            if (split := self._prefix_split(chunk)) is not None:
                new_tokens = generate_after_prefix(self.model, split, max_new_tokens=max_new_tokens,
                                                   pad_token_id=self.tokenizer.pad_token_id, **sampling)
            else:
                batch = self._encode(chunk)
                if self.compile_generation and not do_sample:  # greedy rows do not depend on each other
                    batch = pad_rows(batch, bucket_rows(len(chunk), self.generation_batch_size))
                # (bucket, prompt + new)
                output = self.model.generate(**batch, max_new_tokens=max_new_tokens, **self._compiled(),
                                             pad_token_id=self.tokenizer.pad_token_id, **sampling)
                new_tokens = output[:len(chunk), batch["input_ids"].shape[1]:]  # the real rows
            completions.extend(self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
        return completions

    @torch.inference_mode()
    def sample_with_ids(self, prompts: list[str | list[dict]], max_new_tokens: int, temperature: float = 1.0,
                        top_p: float = 1.0) -> list[tuple[list[int], list[int], str]]:
        """Sampled completions with their token ids: (prompt ids, completion ids through EOS, text) per
        prompt. For estimates that need the sampled tokens themselves (KL from a reference model)."""
        texts = [render_prompt(self.tokenizer, prompt) for prompt in prompts]
        step = self.generation_batch_size or len(texts)
        out: list[tuple[list[int], list[int], str]] = []
        for start in range(0, len(texts), step):
            batch = self._encode(tuple(texts[start:start + step]))
            output = self.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=True,
                                         temperature=temperature, top_p=top_p, top_k=None,
                                         pad_token_id=self.tokenizer.pad_token_id)  # (batch, prompt + new)
            width = batch["input_ids"].shape[1]
            for row, ids in enumerate(output.tolist()):
                mask = batch["attention_mask"][row].tolist()
                prompt = [token for token, keep in zip(batch["input_ids"][row].tolist(), mask) if keep]
                completion = ids[width:]
                if self.tokenizer.eos_token_id in completion:  # keep EOS, drop the padding after it
                    completion = completion[:completion.index(self.tokenizer.eos_token_id) + 1]
                out.append((prompt, completion, self.tokenizer.decode(completion, skip_special_tokens=True)))
        return out

    @torch.inference_mode()
    def completion_logprobs(self, pairs: list[tuple[list[int], list[int]]], batch_size: int = 4) -> list[torch.Tensor]:
        """log p(completion token t | prompt, tokens < t) for each (prompt ids, completion ids), fp32 (len,).

        Sequences are right-padded, so positions start at 0 for every row and padding, which comes
        after the tokens scored, cannot affect them under causal attention.
        """
        pad = self.tokenizer.pad_token_id
        result: list[torch.Tensor] = []
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start:start + batch_size]
            sequences = [prompt + completion for prompt, completion in chunk]
            width = max(len(sequence) for sequence in sequences)
            ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences], device=self.device)  # (b, width)
            mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device=self.device)
            logits = self.model(input_ids=ids, attention_mask=mask).logits  # (b, width, vocab)
            for row, (prompt, completion) in enumerate(chunk):
                if not completion:
                    result.append(torch.zeros(0))
                    continue
                # logits at position i predict token i + 1
                scores = logits[row, len(prompt) - 1:len(prompt) - 1 + len(completion)].float()  # (len, vocab)
                targets = torch.tensor(completion, device=scores.device)
                result.append(scores.log_softmax(-1).gather(-1, targets[:, None])[:, 0].cpu())
        return result

    @torch.inference_mode()
    def generate_population(self, prompts: list[str | list[dict]], max_new_tokens: int, factors: Sequence[Any],
                            stacked: Sequence[torch.Tensor]) -> list[list[str]]:
        """Greedy completions of every prompt under each of P LoRA candidates, in one generate per prompt batch.

        factors: the adapter space's LoRAFactor list; stacked[i]: (P, *factors[i].weight.shape), e.g.
        AdapterSpace.candidate_factors(candidates); or LowRankSpace's factors (plain Linear modules,
        stacked[i]: (P, *factors[i].shape)); or FullParameterSpace's (whole parameters, stacked[i]: (P, *shape)
        in the live dtype). Returns P lists, each like generate(prompts).
        Each prompt batch is encoded exactly as generate() does (left-padded, or split at its shared prefix,
        which then runs once per candidate: its KV cache depends on the candidate's weights), then tiled P
        times, candidate-major, so every candidate's rows see the same tokens and padding as on its own.
        """
        from ..spaces.full import StackedWeight
        from .multi_lora import population_adapters, population_linear_deltas
        from .stacked_weights import population_weights

        # PEFT adapter factors carry their live LoRA weight; low-rank factors of a plain model (space
        # lowrank, EGGROLL) name the Linear module they perturb; full-rank members (space full) are whole
        # stacked copies of each perturbed parameter.
        patch = (population_adapters if isinstance(factors[0], LoRAFactor) else
                 population_weights if isinstance(factors[0], StackedWeight) else population_linear_deltas)
        population = int(stacked[0].shape[0])
        texts = [render_prompt(self.tokenizer, prompt) for prompt in prompts]
        step = self.generation_batch_size or len(texts)
        completions: list[list[str]] = [[] for _ in range(population)]
        greedy = {"max_new_tokens": max_new_tokens, **self._greedy(), "pad_token_id": self.tokenizer.pad_token_id}
        for start in range(0, len(texts), step):
            chunk = tuple(texts[start:start + step])
            if (split := self._prefix_split(chunk)) is not None:
                group = split.rows
                new_tokens = generate_after_prefix(self.model, split, population,
                                                   lambda rows: patch(self.model, factors, stacked, rows), **greedy)
            else:
                batch = self._encode(chunk)  # (group, prompt) ids and mask
                group, prompt_length = batch["input_ids"].shape
                tiled = {key: value.repeat(population, 1) for key, value in batch.items()}  # (P * group, prompt)
                with patch(self.model, factors, stacked, group):
                    new_tokens = self.model.generate(**tiled, **greedy)[:, prompt_length:]  # (P * group, new)
            decoded = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            for candidate in range(population):
                completions[candidate].extend(decoded[candidate * group:(candidate + 1) * group])
        return completions

    def save_pretrained(self, directory: str) -> None:
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def context_length(self) -> int | None:
        """The model's position limit (`max_position_embeddings`); None for a model that states none."""
        config = getattr(self.model, "config", None)  # a transformers model's config; a bare nn.Module has none
        limit = getattr(config, "max_position_embeddings", None)
        return int(limit) if isinstance(limit, int) and limit > 0 else None

    def close(self) -> None:
        """Nothing to release: the model lives in this process and goes with it."""
