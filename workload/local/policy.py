"""Turn contexts -> model inputs, generation and log-probabilities, shared by every phase.

A turn's context is the conversation the endpoint would receive: the last
``image_history`` user messages built by ``workload.maze.prompts.build_user_message``
(style ``compact``) with the agent's replies between them, rendered by the model's own
chat template. Training sequences are ``prompt + completion`` where only completion
tokens count in the loss (observation tokens are masked), exactly as generated.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import torch
from PIL import Image

from workload.local.grpo import token_logprobs
from workload.maze.prompts import COMPACT_INSTRUCTION, build_user_message, first_turn_text

PROMPT_STYLE = "compact"
PLACEHOLDER_IMAGE_URL = "data:,"  # the chat template writes the same vision tokens whatever an image's URL
PROMPT_TEXTS_KEPT = 4096  # rendered prompt texts remembered (one or two with a window of one frame)


def turn_messages(
    frames: list[np.ndarray], replies: list[str], turn: int, *, history: int, size: int
) -> list[dict]:
    """Chat messages for ``turn``: the last ``history`` frames up to it and the replies between them."""
    return turn_context(frames, replies, turn, history=history, size=size).messages


def _user_text(turn: int, size: int) -> str:
    """The text part of ``build_user_message`` for a turn in ``PROMPT_STYLE`` (no feedback in it)."""
    return first_turn_text(PROMPT_STYLE, size) if turn == 0 else COMPACT_INSTRUCTION


class Context:
    """One turn to encode: the last ``history`` frames up to ``turn`` and the replies between them.

    ``messages`` (a PNG per frame) and ``images`` are built on first use; ``key`` is what they
    are made of (texts, raw frames, replies), so equal keys mean equal messages and images and
    repeated turns are told apart without encoding any frame.
    """

    def __init__(self, frames: list[np.ndarray], replies: list[str], turn: int, *, history: int, size: int):
        first = max(0, turn - history + 1)
        self.turns = range(first, turn + 1)
        self.frames = [frames[t] for t in self.turns]
        self.replies = [replies[t] for t in self.turns[:-1]]
        self.size = size

    @functools.cached_property
    def key(self) -> tuple:
        texts = tuple(_user_text(t, self.size) for t in self.turns)
        return texts, tuple((f.shape, f.tobytes()) for f in self.frames), tuple(self.replies)

    @functools.cached_property
    def messages(self) -> list[dict]:
        messages: list[dict] = []
        for t, frame in zip(self.turns, self.frames, strict=True):
            messages.append(build_user_message(style=PROMPT_STYLE, frame=frame, first=t == 0, size=self.size))
            if t < self.turns[-1]:
                messages.append({"role": "assistant", "content": self.replies[t - self.turns[0]]})
        return messages

    @functools.cached_property
    def images(self) -> list[Image.Image]:
        return [Image.fromarray(frame) for frame in self.frames]

    @property
    def text_key(self) -> tuple:
        """What the prompt text depends on: the chat template writes the same vision tokens for
        every image, so the frames do not enter it."""
        return tuple(_user_text(t, self.size) for t in self.turns), tuple(self.replies)

    def text_messages(self) -> list[dict]:
        """``messages`` with a placeholder for each image URL: the same prompt text, no PNG encoded."""
        texts, replies = self.text_key
        messages: list[dict] = []
        for index, text in enumerate(texts):
            image = {"type": "image_url", "image_url": {"url": PLACEHOLDER_IMAGE_URL}}
            messages.append({"role": "user", "content": [{"type": "text", "text": text}, image]})
            if index < len(replies):
                messages.append({"role": "assistant", "content": replies[index]})
        return messages


def turn_context(
    frames: list[np.ndarray], replies: list[str], turn: int, *, history: int, size: int
) -> Context:
    """The ``Context`` of ``turn`` (messages + PIL images of the frames in the window)."""
    return Context(frames, replies, turn, history=history, size=size)


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One context's prompt, unpadded: token ids, their modality types (1: image), and the
    patches and grid of each of its images."""

    input_ids: tuple[int, ...]
    mm_token_type_ids: tuple[int, ...]
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor


class Encoder:
    """Encodes contexts with the model's processor; builds padded training batches."""

    def __init__(self, processor: Any):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.eos_id = self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token)
        self.pad_id = self.tokenizer.pad_token_id
        vision = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
        self.vision_token_ids = frozenset(self.tokenizer.convert_tokens_to_ids(t) for t in vision)
        self._texts: dict[tuple, str] = {}

    def prompt_text(self, context: Context) -> str:
        """The chat template applied to ``context`` (rendered once per distinct text)."""
        key = context.text_key
        if key not in self._texts:
            if len(self._texts) >= PROMPT_TEXTS_KEPT:
                self._texts.clear()
            self._texts[key] = self.processor.apply_chat_template(
                context.text_messages(), add_generation_prompt=True, tokenize=False
            )
        return self._texts[key]

    def encode(self, contexts: list[Context]) -> dict[str, torch.Tensor]:
        """Left-padded prompt batch: input_ids, attention_mask, mm_token_type_ids, pixel_values, image_grid_thw."""
        return self.collate(self.encode_each(contexts))

    def encode_each(self, contexts: list[Context]) -> list[Encoded]:
        """Each context's prompt, unpadded (one processor call for all of them)."""
        texts = [self.prompt_text(c) for c in contexts]
        images = [image for c in contexts for image in c.images]
        batch = self.processor(text=texts, images=images, return_tensors="pt", padding=True)
        patches = batch["image_grid_thw"].prod(dim=-1).tolist() if images else []
        items, image_at, patch_at = [], 0, 0
        for row, context in enumerate(contexts):
            keep = batch["attention_mask"][row].bool()
            count = len(context.images)
            width = sum(patches[image_at : image_at + count])
            items.append(
                Encoded(
                    input_ids=tuple(batch["input_ids"][row][keep].tolist()),
                    mm_token_type_ids=tuple(batch["mm_token_type_ids"][row][keep].tolist()),
                    pixel_values=batch["pixel_values"][patch_at : patch_at + width],
                    image_grid_thw=batch["image_grid_thw"][image_at : image_at + count],
                )
            )
            image_at, patch_at = image_at + count, patch_at + width
        return items

    def collate(
        self, items: list[Encoded], completions: list[list[int]] | None = None
    ) -> dict[str, torch.Tensor]:
        """Left-padded batch of ``items`` (the processor's own padding), each followed by its
        completion when ``completions`` are given (then with ``loss_mask`` on completion tokens only)."""
        tails = completions if completions is not None else [[] for _ in items]
        pairs = list(zip(items, tails, strict=True))
        rows = [list(item.input_ids) + list(tail) for item, tail in pairs]
        width = max(len(r) for r in rows)

        def pad(seqs: list[list[int]], value: int) -> torch.Tensor:
            return torch.tensor([[value] * (width - len(s)) + s for s in seqs], dtype=torch.long)

        batch = {
            "input_ids": pad(rows, self.pad_id),
            "attention_mask": pad([[1] * len(r) for r in rows], 0),
            # completion tokens are text
            "mm_token_type_ids": pad([list(i.mm_token_type_ids) + [0] * len(t) for i, t in pairs], 0),
            "pixel_values": torch.cat([i.pixel_values for i in items]),
            "image_grid_thw": torch.cat([i.image_grid_thw for i in items]),
        }
        if completions is not None:
            batch["loss_mask"] = pad([[0] * len(i.input_ids) + [1] * len(t) for i, t in pairs], 0)
        return batch

    def decode(self, completion: list[int]) -> str:
        return self.tokenizer.decode(completion, skip_special_tokens=True)

    def training_batch(
        self, contexts: list[Context], completions: list[list[int]]
    ) -> dict[str, torch.Tensor]:
        """``prompt + completion`` sequences, left-padded, with ``loss_mask`` on completion tokens only."""
        return self.collate(self.encode_each(contexts), completions)


class EncodingCache:
    """Encoded prompts by ``Context.key``: a context met again is neither rendered nor encoded
    again. Keep one only while its contexts can come back (one play, one update, one fixed set)."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.items: dict[tuple, Encoded] = {}

    def batch(
        self, contexts: list[Context], completions: list[list[int]] | None = None
    ) -> dict[str, torch.Tensor]:
        """``Encoder.collate`` of ``contexts`` (and ``completions``), encoding only the new ones."""
        missing = {}
        for context in contexts:
            if context.key not in self.items:
                missing.setdefault(context.key, context)
        if missing:
            self.items.update(zip(missing, self.encoder.encode_each(list(missing.values())), strict=True))
        return self.encoder.collate([self.items[c.key] for c in contexts], completions)


def completion_logprobs(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per-position log-probability of each next token (shape [B, T-1]); pair with ``loss_mask[:, 1:]``."""
    inputs = {k: v for k, v in batch.items() if k != "loss_mask"}
    logits = model(**inputs).logits[:, :-1]
    targets = batch["input_ids"][:, 1:]
    return token_logprobs(logits, targets)


@torch.no_grad()
def generate(
    model: Any,
    encoder: Encoder,
    contexts: list[Context],
    *,
    temperature: float,
    max_new_tokens: int,
    rows: list[int] | None = None,
) -> list[list[int]]:
    """New token ids per row, cut after the first end-of-turn token (included).

    Row ``r`` continues ``contexts[rows[r]]`` (default: one row per context). Rows that share a
    context share its prefill, and rows that also drew the same tokens so far share each
    decoding step; every row still draws its own tokens. The draws are those of transformers'
    ``generate`` on the expanded batch (one softmax and ``torch.multinomial`` over all rows,
    or argmax when ``temperature`` is 0; finished rows padded): a row's logits do not depend
    on the other rows of its batch, so the tokens and the random stream after them are the
    same, seed for seed (checked against ``generate`` in the tests).
    """
    return generate_encoded(
        model,
        encoder,
        encoder.encode(contexts),
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        rows=rows,
    )


@torch.no_grad()
def generate_encoded(
    model: Any,
    encoder: Encoder,
    batch: dict[str, torch.Tensor],
    *,
    temperature: float,
    max_new_tokens: int,
    rows: list[int] | None = None,
) -> list[list[int]]:
    """``generate`` on an encoded prompt batch (``Encoder.encode``, ``EncodingCache.batch``)."""
    device = model.device
    prefix = torch.tensor(range(batch["input_ids"].shape[0]) if rows is None else rows, device=device)
    batch = {k: v.to(device) for k, v in batch.items()}
    out = model(**batch, use_cache=True, logits_to_keep=1)
    cache, mask, deltas = out.cache, batch["attention_mask"], _rope_deltas(model)
    logits = out.logits[:, -1].float()  # one row per distinct prefix; ``prefix[r]`` is row r's
    unfinished = torch.ones_like(prefix, dtype=torch.bool)
    drawn = []
    for step in range(max_new_tokens):
        scores = logits.index_select(0, prefix)
        if temperature > 0:
            probs = torch.softmax(scores / temperature if temperature != 1.0 else scores, dim=-1)
            tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
        else:
            tokens = scores.argmax(dim=-1)
        tokens = torch.where(unfinished, tokens, encoder.pad_id)
        drawn.append(tokens)
        unfinished &= tokens != encoder.eos_id
        if step == max_new_tokens - 1 or not bool(unfinished.any()):
            break
        # The distinct (prefix, token) pairs are the next prefixes; finished rows feed padding, as in generate.
        pairs: dict[tuple[int, int], int] = {}
        prefix = torch.tensor(
            [
                pairs.setdefault(pair, len(pairs))
                for pair in zip(prefix.tolist(), tokens.tolist(), strict=True)
            ],
            device=device,
        )
        parents = torch.tensor([p for p, _ in pairs], device=device)
        cache.reorder_cache(parents)
        mask = torch.cat([mask.index_select(0, parents), mask.new_ones(len(pairs), 1)], dim=-1)
        deltas = deltas.index_select(0, parents)
        positions = (mask.cumsum(-1) - 1)[:, -1:] + deltas  # text positions run on after the prompt's
        out = model(
            input_ids=torch.tensor([t for _, t in pairs], device=device)[:, None],
            attention_mask=mask,
            position_ids=positions[None].expand(3, -1, -1),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1].float()
    completions = []
    for row in torch.stack(drawn, dim=1).tolist():
        cut = row.index(encoder.eos_id) + 1 if encoder.eos_id in row else len(row)
        completions.append(row[:cut])
    return completions


def _rope_deltas(model: Any) -> torch.Tensor:
    """The multimodal rope offsets the prefill just computed (one per row), wherever peft keeps the model."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.model.rope_deltas
