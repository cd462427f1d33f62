"""Turn contexts -> model inputs, generation and log-probabilities, shared by every phase.

A turn's context is the conversation the endpoint would receive: the last
``image_history`` user messages built by ``workload.maze.prompts.build_user_message``
(style ``compact``) with the agent's replies between them, rendered by the model's own
chat template. Training sequences are ``prompt + completion`` where only completion
tokens count in the loss (observation tokens are masked), exactly as generated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from PIL import Image

from workload.local.grpo import token_logprobs
from workload.maze.prompts import build_user_message

PROMPT_STYLE = "compact"


def turn_messages(
    frames: list[np.ndarray], replies: list[str], turn: int, *, history: int, size: int
) -> list[dict]:
    """Chat messages for ``turn``: the last ``history`` frames up to it and the replies between them."""
    first = max(0, turn - history + 1)
    messages: list[dict] = []
    for t in range(first, turn + 1):
        messages.append(build_user_message(style=PROMPT_STYLE, frame=frames[t], first=t == 0, size=size))
        if t < turn:
            messages.append({"role": "assistant", "content": replies[t]})
    return messages


def _images(frames: list[np.ndarray], turn: int, history: int) -> list[Image.Image]:
    return [Image.fromarray(frames[t]) for t in range(max(0, turn - history + 1), turn + 1)]


@dataclasses.dataclass
class Context:
    """One turn to encode: its messages and the frames they show, in order."""

    messages: list[dict]
    images: list[Image.Image]


def turn_context(
    frames: list[np.ndarray], replies: list[str], turn: int, *, history: int, size: int
) -> Context:
    """The ``Context`` of ``turn`` (messages + PIL images of the frames in the window)."""
    return Context(
        turn_messages(frames, replies, turn, history=history, size=size), _images(frames, turn, history)
    )


class Encoder:
    """Encodes contexts with the model's processor; builds padded training batches."""

    def __init__(self, processor: Any):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.eos_id = self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token)
        self.pad_id = self.tokenizer.pad_token_id
        vision = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
        self.vision_token_ids = frozenset(self.tokenizer.convert_tokens_to_ids(t) for t in vision)

    def prompt_text(self, context: Context) -> str:
        return self.processor.apply_chat_template(
            context.messages, add_generation_prompt=True, tokenize=False
        )

    def encode(self, contexts: list[Context]) -> dict[str, torch.Tensor]:
        """Left-padded prompt batch: input_ids, attention_mask, mm_token_type_ids, pixel_values, image_grid_thw."""
        texts = [self.prompt_text(c) for c in contexts]
        images = [image for c in contexts for image in c.images]
        batch = self.processor(text=texts, images=images, return_tensors="pt", padding=True)
        return dict(batch)

    def decode(self, completion: list[int]) -> str:
        return self.tokenizer.decode(completion, skip_special_tokens=True)

    def training_batch(
        self, contexts: list[Context], completions: list[list[int]]
    ) -> dict[str, torch.Tensor]:
        """``prompt + completion`` sequences, left-padded, with ``loss_mask`` on completion tokens only."""
        prompts = self.encode(contexts)
        rows, types, masks = [], [], []
        for i, completion in enumerate(completions):
            keep = prompts["attention_mask"][i].bool()
            ids = prompts["input_ids"][i][keep].tolist()
            mm = prompts["mm_token_type_ids"][i][keep].tolist()
            rows.append(ids + list(completion))
            types.append(mm + [0] * len(completion))  # completion tokens are text
            masks.append([0] * len(ids) + [1] * len(completion))
        width = max(len(r) for r in rows)

        def pad(seqs: list[list[int]], value: int) -> torch.Tensor:
            return torch.tensor([[value] * (width - len(s)) + s for s in seqs], dtype=torch.long)

        return {
            "input_ids": pad(rows, self.pad_id),
            "attention_mask": pad([[1] * len(r) for r in rows], 0),
            "mm_token_type_ids": pad(types, 0),
            "pixel_values": prompts["pixel_values"],
            "image_grid_thw": prompts["image_grid_thw"],
            "loss_mask": pad(masks, 0),
        }


def completion_logprobs(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per-position log-probability of each next token (shape [B, T-1]); pair with ``loss_mask[:, 1:]``."""
    inputs = {k: v for k, v in batch.items() if k != "loss_mask"}
    logits = model(**inputs).logits[:, :-1]
    targets = batch["input_ids"][:, 1:]
    return token_logprobs(logits, targets)


@torch.no_grad()
def generate(
    model: Any, encoder: Encoder, contexts: list[Context], *, temperature: float, max_new_tokens: int
) -> list[list[int]]:
    """New token ids per context, cut after the first end-of-turn token (included)."""
    batch = encoder.encode(contexts)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    out = model.generate(
        **batch,
        max_new_tokens=max_new_tokens,
        pad_token_id=encoder.pad_id,
        eos_token_id=encoder.eos_id,
        **sampling,
    )
    new = out[:, batch["input_ids"].shape[1] :].tolist()
    completions = []
    for row in new:
        cut = row.index(encoder.eos_id) + 1 if encoder.eos_id in row else len(row)
        completions.append(row[:cut])
    return completions
