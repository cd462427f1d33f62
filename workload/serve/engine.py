"""Generation on CPU with transformers + peft: one base model, many LoRA adapters.

All adapters live in ONE `PeftModel` wrapped around the base model (loading an adapter adds
its LoRA matrices, unloading deletes them), so the base weights are held once however many
adapters a replica serves. Generation calls the inner model directly: peft's own `generate`
looks up the active adapter's config and fails once every adapter has been deleted. A lock
serialises adapter switches and generation (one CPU model, one request at a time).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from workload.serve.protocol import ChatRequest, Completion


class GenerationEngine:
    """Base model + processor from ``model_dir``; adapters loaded and unloaded by name."""

    def __init__(self, model_dir: str | Path, *, torch_threads: int | None = None) -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        from workload.model.processor import ImageOnlyQwen3VLProcessor

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self._model = AutoModelForImageTextToText.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        # AutoProcessor cannot resolve the image-only subclass (it returns the tokenizer alone).
        self._processor = ImageOnlyQwen3VLProcessor.from_pretrained(model_dir)
        self._peft: Any = None
        self._paths: dict[str, str] = {}
        self._lock = threading.Lock()
        self.load_count: dict[str, int] = {}

    def loaded_adapters(self) -> list[str]:
        """Names of the adapters whose weights are in memory now."""
        with self._lock:
            return sorted(self._paths)

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Add adapter ``name`` from the PEFT folder ``path`` (no-op when already loaded)."""
        with self._lock:
            self._load_locked(name, str(path))

    def _load_locked(self, name: str, path: str) -> None:
        from peft import PeftModel

        if name in self._paths:
            return
        if self._peft is None:
            self._peft = PeftModel.from_pretrained(self._model, path, adapter_name=name)
        else:
            self._peft.load_adapter(path, adapter_name=name)
        self._peft.eval()
        self._paths[name] = path
        self.load_count[name] = self.load_count.get(name, 0) + 1

    def unload_adapter(self, name: str) -> None:
        """Delete adapter ``name``'s weights; idempotent (eviction may call it twice)."""
        with self._lock:
            if self._paths.pop(name, None) is not None:
                self._peft.delete_adapter(name)

    def generate(
        self, request: ChatRequest, *, adapter: str | None = None, adapter_path: str | None = None
    ) -> Completion:
        """Complete ``request`` with the base model (adapter None) or with ``adapter``.

        ``adapter_path`` reloads the adapter if it was evicted between routing and generation.
        """
        inputs = self._inputs(request)
        with self._lock:
            if adapter is not None:
                if adapter not in self._paths:
                    if adapter_path is None:
                        raise KeyError(f"adapter {adapter!r} is not loaded")
                    self._load_locked(adapter, adapter_path)
                self._peft.base_model.set_adapter(adapter)
                return self._run(request, inputs)
            if self._peft is None or not self._paths:
                return self._run(request, inputs)
            self._peft.base_model.disable_adapter_layers()
            try:
                return self._run(request, inputs)
            finally:
                self._peft.base_model.enable_adapter_layers()

    def _inputs(self, request: ChatRequest) -> Any:
        text = self._processor.apply_chat_template(
            request.messages, add_generation_prompt=True, tokenize=False
        )
        return self._processor(text=[text], images=request.images or None, return_tensors="pt")

    def _run(self, request: ChatRequest, inputs: Any) -> Completion:
        import torch

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
        with torch.no_grad():
            output = self._model.generate(**inputs, max_new_tokens=request.max_tokens, **sampling)
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
