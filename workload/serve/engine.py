"""Generation on CPU with transformers + peft: one base model, many LoRA adapters.

All adapters live in ONE `PeftModel` wrapped around the base model (loading an adapter adds
its LoRA matrices, unloading deletes them), so the base weights are held once however many
adapters a replica serves. Generation calls the inner model directly: peft's own `generate`
looks up the active adapter's config and fails once every adapter has been deleted. A lock
serialises adapter switches and generation (one CPU model, one request at a time).

An adapter is checked against the serving rules and the base model's layer shapes before peft
sees it; if peft still fails halfway, its layers are removed again, and if that is not possible
the engine reports itself unhealthy so that Serve replaces the replica.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from workload.serve.errors import bad_request, too_large
from workload.serve.protocol import ChatRequest, Completion
from workload.serving_rules import (
    ADAPTER_WEIGHTS,
    DEFAULT_MAX_LORA_RANK,
    AdapterRuleError,
    AdapterSummary,
    check_base,
    inspect_adapter,
    served_lora_config,
)


class GenerationCancelled(Exception):
    """The client went away; generation stopped early."""


class GenerationEngine:
    """Base model + processor from ``model_dir``; adapters loaded and unloaded by name."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        torch_threads: int | None = None,
        max_lora_rank: int = DEFAULT_MAX_LORA_RANK,
        max_prompt_tokens: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        from workload.model.processor import ImageOnlyQwen3VLProcessor

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.model_dir = Path(model_dir)
        self._model = AutoModelForImageTextToText.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        # AutoProcessor cannot resolve the image-only subclass (it returns the tokenizer alone).
        self._processor = ImageOnlyQwen3VLProcessor.from_pretrained(model_dir)
        self._peft: Any = None
        self._paths: dict[str, str] = {}
        self._lock = threading.Lock()
        self.load_count: dict[str, int] = {}
        self.cancelled_count = 0  # generations stopped early because the client went away
        self.max_lora_rank = max_lora_rank
        # (out, in) of every linear layer, read before any LoRA layer wraps them.
        self.base_shapes = {
            name: tuple(module.weight.shape)
            for name, module in self._model.named_modules()
            if isinstance(module, torch.nn.Linear)
        }
        self.max_positions: int | None = getattr(
            self._model.config.get_text_config(), "max_position_embeddings", None
        )
        caps = [cap for cap in (max_prompt_tokens, self.max_positions) if cap]
        self.max_prompt_tokens = min(caps) if caps else None
        self.unhealthy: str | None = None
        # Tokens only the chat template writes (<|im_start|>, <|image_pad|>...): typed in text they would
        # forge turns or make the processor fail counting image tokens.
        tokenizer = self._processor.tokenizer
        self.special_tokens = tuple(sorted(
            {t.content for t in tokenizer.added_tokens_decoder.values() if t.special} | set(tokenizer.all_special_tokens),
            key=len, reverse=True,
        ))

    def loaded_adapters(self) -> list[str]:
        """Names of the adapters whose weights are in memory now.

        Answers while a generation holds the engine (seconds): the names are copied without the
        lock (one C-level dict copy; every change to the dict happens under the lock).
        """
        return sorted(self._paths.copy())

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Add adapter ``name`` from the PEFT folder ``path`` (no-op when already loaded).

        Raises `AdapterRuleError` (before touching the model) for an adapter the endpoint refuses.
        """
        with self._lock:
            self._load_locked(name, str(path))

    def check_adapter(self, path: str | Path) -> AdapterSummary:
        """Raise `AdapterRuleError` unless the adapter at ``path`` fits the rules and this base."""
        summary = inspect_adapter(Path(path), max_lora_rank=self.max_lora_rank, base_shapes=self.base_shapes)
        check_base(summary.config, Path(path), self.model_dir)
        _check_finite(Path(path) / ADAPTER_WEIGHTS)
        return summary

    def _load_locked(self, name: str, path: str) -> None:
        if name in self._paths:
            return
        summary = self.check_adapter(path)
        self._attach(name, path, served_lora_config(summary))
        self._paths[name] = path
        self.load_count[name] = self.load_count.get(name, 0) + 1

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
        """Delete adapter ``name``'s weights; idempotent (eviction may call it twice)."""
        with self._lock:
            if self._paths.pop(name, None) is not None:
                self._peft.delete_adapter(name)

    def generate(
        self,
        request: ChatRequest,
        *,
        adapter: str | None = None,
        adapter_path: str | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        """Complete ``request`` with the base model (adapter None) or with ``adapter``.

        ``adapter_path`` reloads the adapter if it was evicted between routing and generation;
        setting ``cancel`` stops generation at the next token (raises `GenerationCancelled`).
        """
        inputs, request = self._inputs(request)
        with self._lock:
            if cancel is not None and cancel.is_set():
                self.cancelled_count += 1
                raise GenerationCancelled("the client went away before generation started")
            if adapter is not None:
                if adapter not in self._paths:
                    if adapter_path is None:
                        raise KeyError(f"adapter {adapter!r} is not loaded")
                    self._load_locked(adapter, adapter_path)
                self._peft.base_model.set_adapter(adapter)
                return self._run(request, inputs, cancel)
            if self._peft is None or not self._paths:
                return self._run(request, inputs, cancel)
            self._peft.base_model.disable_adapter_layers()
            try:
                return self._run(request, inputs, cancel)
            finally:
                self._peft.base_model.enable_adapter_layers()

    def check_text(self, request: ChatRequest) -> None:
        """400 naming the part when a message's text holds a special token."""
        for i, message in enumerate(request.messages):
            content = message["content"]
            if isinstance(content, str):
                texts = [(f"messages[{i}].content", content)]
            else:
                texts = [(f"messages[{i}].content[{j}].text", p["text"]) for j, p in enumerate(content) if p["type"] == "text"]
            for at, text in texts:
                token = next((t for t in self.special_tokens if t in text), None)
                if token is not None:
                    raise bad_request(
                        f"{at} holds the special token {token!r}, which only the chat template writes; remove it "
                        "(images go in image_url parts)",
                        param=at,
                    )

    def _inputs(self, request: ChatRequest) -> tuple[Any, ChatRequest]:
        """The processor's tensors, and ``request`` with a default reply length cut to the context left."""
        self.check_text(request)
        text = self._processor.apply_chat_template(
            request.messages, add_generation_prompt=True, tokenize=False
        )
        inputs = self._processor(text=[text], images=request.images or None, return_tensors="pt")
        prompt_tokens = inputs["input_ids"].shape[1]
        limit = self.max_prompt_tokens
        if limit is not None and prompt_tokens > limit:
            raise too_large(
                f"the prompt is {prompt_tokens} tokens (text and images); the limit is {limit}",
                param="messages",
            )
        left = None if self.max_positions is None else self.max_positions - prompt_tokens
        if left is not None and request.max_tokens_defaulted and 0 < left < request.max_tokens:
            request = dataclasses.replace(request, max_tokens=left)
        if left is not None and request.max_tokens > left:
            raise too_large(
                f"the prompt ({prompt_tokens} tokens) plus max_tokens ({request.max_tokens}) exceeds the "
                f"model's {self.max_positions} positions; lower max_tokens or shorten the messages",
                param="max_tokens",
            )
        return inputs, request

    def _run(self, request: ChatRequest, inputs: Any, cancel: threading.Event | None = None) -> Completion:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _StopWhenCancelled(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), bool(cancel.is_set()), dtype=torch.bool)

        sampling: dict[str, Any] = {"do_sample": False}
        if not request.greedy:
            sampling = {
                "do_sample": True,
                "temperature": request.temperature,
                "top_p": request.top_p,
                "top_k": 0,
            }
            if request.seed is not None:
                torch.manual_seed(request.seed)
        if cancel is not None:
            sampling["stopping_criteria"] = StoppingCriteriaList([_StopWhenCancelled()])
        with torch.no_grad():
            output = self._model.generate(**inputs, max_new_tokens=request.max_tokens, **sampling)
        if cancel is not None and cancel.is_set():
            self.cancelled_count += 1
            raise GenerationCancelled("the client went away; generation stopped")
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = output[0, prompt_len:].tolist()
        tokenizer = self._processor.tokenizer
        eos = self._model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        ended = bool(new_tokens) and new_tokens[-1] in eos_ids
        text = tokenizer.decode(new_tokens, skip_special_tokens=True)
        finish = "stop" if ended else "length"
        for stop in request.stop:
            if stop in text:
                text, finish = text[: text.index(stop)], "stop"
        return Completion(
            text=text, finish_reason=finish, prompt_tokens=prompt_len, completion_tokens=len(new_tokens)
        )


def _check_finite(weights: Path) -> None:
    """Raise `AdapterRuleError` naming the first tensor holding NaN or infinity (sampling would fail on it)."""
    import torch
    from safetensors.torch import load_file

    for name, tensor in load_file(weights).items():
        if not torch.isfinite(tensor).all():
            raise AdapterRuleError(name, "holds NaN or infinite values; retrain or re-export the adapter")
