"""Generation on CPU with transformers + peft: one base model, a few LoRA adapters at a time.

All adapters live in ONE `PeftModel` wrapped around the base model (loading an adapter adds its
LoRA matrices, unloading deletes them), so the base weights are held once. Generation calls the
inner model directly: peft's own `generate` looks up the active adapter's config and fails once
every adapter has been deleted. A lock serialises adapter changes and generation (one CPU model,
one request at a time); beyond ``max_adapters`` the least recently used adapter is unloaded.

An adapter is checked against the serving rules and the base model's layer shapes before peft
sees it; if peft still fails halfway, its layers are removed again, and if that is not possible
the engine reports itself unhealthy so that Serve replaces the replica.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from pathlib import Path
from typing import Any

from workload.serve.adapters import fingerprint
from workload.serve.protocol import ChatRequest, Completion, bad_request
from workload.serve.settings import DEFAULT_MAX_ADAPTERS
from workload.serving_rules import (
    ADAPTER_WEIGHTS,
    DEFAULT_MAX_LORA_RANK,
    AdapterRuleError,
    AdapterSummary,
    check_base,
    inspect_adapter,
    served_lora_config,
)


class GenerationEngine:
    """Base model + processor from ``model_dir``; adapters loaded by name from their folders."""

    def __init__(self, model_dir: str | Path, *, max_adapters: int = DEFAULT_MAX_ADAPTERS,
                 torch_threads: int | None = None) -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        from workload.model.processor import ImageOnlyQwen3VLProcessor

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.model_dir = Path(model_dir)
        self.max_adapters = max_adapters
        self._model = AutoModelForImageTextToText.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        # AutoProcessor cannot resolve the image-only subclass (it returns the tokenizer alone).
        self._processor = ImageOnlyQwen3VLProcessor.from_pretrained(model_dir)
        self._peft: Any = None
        self._loaded: collections.OrderedDict[str, Any] = collections.OrderedDict()  # name -> files, oldest use first
        self._lock = threading.Lock()
        self.load_count: collections.Counter[str] = collections.Counter()
        self.unhealthy: str | None = None
        # (out, in) of every linear layer, read before any LoRA layer wraps them.
        self.base_shapes = {name: tuple(module.weight.shape) for name, module in self._model.named_modules()
                            if isinstance(module, torch.nn.Linear)}
        self.max_positions: int | None = getattr(self._model.config.get_text_config(), "max_position_embeddings", None)

    def loaded_adapters(self) -> list[str]:
        """The adapters in memory, the least recently used first."""
        return list(self._loaded)

    def check_adapter(self, path: Path) -> AdapterSummary:
        """Raise `AdapterRuleError` unless the adapter at ``path`` fits the rules and this base."""
        summary = inspect_adapter(path, max_lora_rank=DEFAULT_MAX_LORA_RANK, base_shapes=self.base_shapes)
        check_base(summary.config, path, self.model_dir)
        _check_finite(path / ADAPTER_WEIGHTS)
        return summary

    def load_adapter(self, name: str, folder: str | Path) -> None:
        """Have adapter ``name`` from ``folder`` in memory as its files are now (reloaded when they changed).

        Raises `AdapterRuleError` (before touching the model) for an adapter the endpoint refuses, and
        `workload.serve.adapters.AdapterNotFoundError` when the folder holds none.
        """
        with self._lock:
            self._load_locked(name, Path(folder))

    def _load_locked(self, name: str, folder: Path) -> None:
        files = fingerprint(folder)
        if self._loaded.get(name) != files:
            self._unload_locked(name)
            self._attach(name, str(folder), served_lora_config(self.check_adapter(folder)))
            self._loaded[name] = files
            self.load_count[name] += 1
        self._loaded.move_to_end(name)
        while len(self._loaded) > self.max_adapters:
            self._unload_locked(next(iter(self._loaded)))

    def _attach(self, name: str, path: str, lora_config: dict[str, Any]) -> None:
        """Let peft load the adapter with ``lora_config``; on failure remove whatever it added, or mark the
        engine unhealthy. peft reads only the weights from ``path``: the adapter is registered first, so its
        `load_adapter` skips the author's config (see `served_lora_config`)."""
        from peft import LoraConfig, PeftModel

        config = LoraConfig(**lora_config)
        created = self._peft is None
        try:
            if created:
                self._peft = PeftModel(self._model, config, adapter_name=name)
            else:
                self._peft.add_adapter(name, config)
            self._peft.load_adapter(path, adapter_name=name)
            self._peft.eval()
        except Exception:
            self._detach_failed(name, created)
            raise

    def _detach_failed(self, name: str, created: bool) -> None:
        try:
            if created and self._peft is not None:
                self._peft.base_model.unload()  # puts the base layers back in place of LoRA layers
                self._peft = None
            elif self._peft is not None and name in self._peft.peft_config:
                self._peft.delete_adapter(name)
        except Exception as exc:  # the model may hold half an adapter: let Serve replace the replica
            self.unhealthy = f"a failed adapter load could not be undone ({exc.__class__.__name__})"
        if created and self._peft is None and self._has_lora_layers():
            self.unhealthy = "LoRA layers remain in the base model after a failed adapter load"

    def _has_lora_layers(self) -> bool:
        from peft.tuners.lora import LoraLayer

        return any(isinstance(m, LoraLayer) for m in self._model.modules())

    def unload_adapter(self, name: str) -> None:
        """Delete adapter ``name``'s weights; nothing when it is not loaded."""
        with self._lock:
            self._unload_locked(name)

    def _unload_locked(self, name: str) -> None:
        if self._loaded.pop(name, None) is not None:
            self._peft.delete_adapter(name)

    def generate(self, request: ChatRequest, *, adapter: str | None = None,
                 folder: str | Path | None = None) -> Completion:
        """Complete ``request`` with the base model (``adapter`` None) or with the adapter in ``folder``."""
        inputs, request = self._inputs(request)
        with self._lock:
            if adapter is not None:
                self._load_locked(adapter, Path(folder))
                self._peft.base_model.set_adapter(adapter)
                return self._run(request, inputs)
            if self._peft is None or not self._loaded:
                return self._run(request, inputs)
            self._peft.base_model.disable_adapter_layers()
            try:
                return self._run(request, inputs)
            finally:
                self._peft.base_model.enable_adapter_layers()

    def _inputs(self, request: ChatRequest) -> tuple[Any, ChatRequest]:
        """The processor's tensors, and ``request`` with a default reply length cut to the context left."""
        text = self._processor.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
        inputs = self._processor(text=[text], images=request.images or None, return_tensors="pt")
        prompt_tokens = inputs["input_ids"].shape[1]
        left = None if self.max_positions is None else self.max_positions - prompt_tokens
        if left is not None and request.max_tokens_defaulted and 0 < left < request.max_tokens:
            request = dataclasses.replace(request, max_tokens=left)
        if left is not None and request.max_tokens > left:
            raise bad_request(
                f"the prompt ({prompt_tokens} tokens) plus max_tokens ({request.max_tokens}) exceeds the model's "
                f"{self.max_positions} positions; lower max_tokens or shorten the messages", param="max_tokens")
        return inputs, request

    def _run(self, request: ChatRequest, inputs: Any) -> Completion:
        import torch

        sampling: dict[str, Any] = {"do_sample": False}
        if not request.greedy:
            sampling = {"do_sample": True, "temperature": request.temperature, "top_p": request.top_p, "top_k": 0}
            if request.seed is not None:
                torch.manual_seed(request.seed)
        with torch.no_grad():
            output = self._model.generate(**inputs, max_new_tokens=request.max_tokens, **sampling)
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = output[0, prompt_len:].tolist()
        eos = self._model.generation_config.eos_token_id
        ended = bool(new_tokens) and new_tokens[-1] in set(eos if isinstance(eos, list) else [eos])
        text = self._processor.tokenizer.decode(new_tokens, skip_special_tokens=True)
        finish = "stop" if ended else "length"
        for stop in request.stop:
            if stop in text:
                text, finish = text[: text.index(stop)], "stop"
        return Completion(text=text, finish_reason=finish, prompt_tokens=prompt_len, completion_tokens=len(new_tokens))


def _check_finite(weights: Path) -> None:
    """Raise `AdapterRuleError` naming the first tensor holding NaN or infinity (sampling would fail on it)."""
    import torch
    from safetensors.torch import load_file

    for name, tensor in load_file(weights).items():
        if not torch.isfinite(tensor).all():
            raise AdapterRuleError(name, "holds NaN or infinite values; retrain or re-export the adapter")
