"""Turn contexts and encodings: the model trains on exactly the prompt the endpoint sends."""

from __future__ import annotations

import json

import pytest
import torch

from workload.local.policy import Encoder, turn_context, turn_messages
from workload.maze.actions import ACTION_STRINGS
from workload.maze.env import Maze2D
from workload.maze.generator import generate_from_seed
from workload.maze.prompts import COMPACT_INSTRUCTION, build_user_message

CELL_PX = 8


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    from workload.model.tiny import load_tiny

    return Encoder(load_tiny(tiny_model_dir)[1])


def _episode_frames(moves: list[str]):
    env = Maze2D(7, cell_px=CELL_PX)
    frames = [env.reset(init_state=generate_from_seed(3, 7))[0]]
    for move in moves:
        frames.append(env.step(move)[0])
    return frames


def _served_inputs(tiny_model_dir, messages):
    """What the local endpoint feeds its model for these messages (its own parser and engine)."""
    from workload.serve.engine import GenerationEngine
    from workload.serve.protocol import parse_chat_request

    body = json.dumps({"model": "base", "messages": messages, "temperature": 0, "max_tokens": 2}).encode()
    request = parse_chat_request(body)
    return GenerationEngine(tiny_model_dir)._inputs(request)[0]


@pytest.mark.parametrize("history", [1, 3])
def test_in_process_prompt_equals_the_served_chat_template_of_the_compact_message(
    tiny_model_dir, encoder, history
):
    frames = _episode_frames(["('move', 0)", "('move', 3)", "('move', 1)"])
    replies = ["('move', 0)", "('move', 3)", "('move', 1)"]
    turn = 3
    ours = encoder.encode([turn_context(frames, replies, turn, history=history, size=7)])
    served = _served_inputs(tiny_model_dir, turn_messages(frames, replies, turn, history=history, size=7))
    for key in ("input_ids", "attention_mask", "mm_token_type_ids", "image_grid_thw"):
        assert torch.equal(ours[key], served[key]), key
    assert torch.equal(ours["pixel_values"], served["pixel_values"])
    images = (ours["input_ids"] == encoder.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum().item()
    assert images == 4 * history  # 56 px frames -> 64 px -> 4 merged tokens each


def test_first_turn_is_the_compact_user_message_with_its_frame():
    frames = _episode_frames([])
    (message,) = turn_messages(frames, [], 0, history=1, size=7)
    assert message == build_user_message(style="compact", frame=frames[0], first=True, size=7)
    assert message["content"][0]["text"] == COMPACT_INSTRUCTION


def test_window_keeps_the_last_frames_and_the_replies_between_them():
    frames = _episode_frames(["('move', 0)", "('move', 3)"])
    messages = turn_messages(frames, ["a", "b"], 2, history=2, size=7)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == "b"
    assert turn_context(frames, ["a", "b"], 2, history=2, size=7).images[-1].size == (56, 56)


def test_training_batch_masks_everything_but_the_completion(encoder):
    frames = _episode_frames([])
    contexts = [turn_context(frames, [], 0, history=1, size=7)] * 2
    action = encoder.tokenizer.convert_tokens_to_ids(ACTION_STRINGS[0])
    completions = [[action, encoder.eos_id], [action]]
    batch = encoder.training_batch(contexts, completions)
    assert batch["loss_mask"].sum(dim=1).tolist() == [2, 1]
    # Row 1 is one token shorter, so it is left-padded by one.
    assert batch["input_ids"][0, -2:].tolist() == [action, encoder.eos_id]
    assert batch["input_ids"][1, -1].item() == action
    assert batch["attention_mask"][1, 0].item() == 0
    assert batch["mm_token_type_ids"][:, -1].tolist() == [0, 0]
    prompt_len = encoder.encode(contexts[:1])["input_ids"].shape[1]
    assert batch["input_ids"].shape[1] == prompt_len + 2


def _transformers_generate(model, encoder, contexts, *, temperature, max_new_tokens):
    """Reference: one ``model.generate`` over every row, as the rollouts ran before prefixes were shared."""
    batch = encoder.encode(contexts)
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature
        else {"do_sample": False}
    )
    out = model.generate(
        **batch,
        max_new_tokens=max_new_tokens,
        pad_token_id=encoder.pad_id,
        eos_token_id=encoder.eos_id,
        **sampling,
    )
    rows = []
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        rows.append(row[: row.index(encoder.eos_id) + 1] if encoder.eos_id in row else row)
    return rows


def _contexts():
    replies = ["('move', 0)", "('move', 3)", "('move', 1)"]
    frames = _episode_frames(replies)
    return [turn_context(frames, replies, turn, history=1, size=7) for turn in range(4)]


@pytest.fixture
def eos_prone_policy(tiny_model_dir):
    """The tiny model (+ a LoRA) with the end-of-turn token made as likely as the likeliest first
    token, so that sampled rows end at different steps."""
    from workload.local.config import load_config
    from workload.local.rollout import attach_lora
    from workload.model.tiny import load_tiny

    model, processor = load_tiny(tiny_model_dir)
    encoder = Encoder(processor)
    with torch.no_grad():
        likely = model(**encoder.encode(_contexts())).logits[:, -1].argmax(-1)[0]
        model.lm_head.weight[encoder.eos_id] = model.lm_head.weight[likely] * 2
    model = attach_lora(model, load_config("local", []).trainer.policy.model.lora)
    model.eval()
    return model, encoder


@pytest.mark.parametrize(("temperature", "max_new_tokens"), [(1.0, 2), (1.0, 3), (0.7, 3), (0.0, 3)])
def test_shared_prefixes_draw_what_generate_draws_for_the_expanded_batch(
    eos_prone_policy, temperature, max_new_tokens
):
    from workload.local.policy import generate

    model, encoder = eos_prone_policy
    contexts = _contexts()
    rows = [i % 4 for i in range(48)] + [2] * 16
    prefill_rows = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: prefill_rows.append(kw["input_ids"].shape), with_kwargs=True
    )
    try:
        torch.manual_seed(11)
        ours = generate(
            model, encoder, contexts, temperature=temperature, max_new_tokens=max_new_tokens, rows=rows
        )
    finally:
        hook.remove()
    after_ours = torch.get_rng_state()
    torch.manual_seed(11)
    reference = _transformers_generate(
        model, encoder, [contexts[r] for r in rows], temperature=temperature, max_new_tokens=max_new_tokens
    )
    assert ours == reference
    assert torch.equal(after_ours, torch.get_rng_state())  # the same draws: later turns sample alike too
    assert prefill_rows[0][0] == 4  # one prefill per distinct context, not per row
    assert all(shape[0] < len(rows) for shape in prefill_rows[1:])  # decoding steps run distinct prefixes
    if temperature:
        lengths = {len(r) for r in ours}
        assert 1 in lengths and max_new_tokens in lengths  # some rows ended at the first token, some ran on


def test_cached_encodings_batch_exactly_as_the_processor_pads_them(encoder):
    from workload.local.policy import EncodingCache

    frames = _episode_frames(["('move', 0)", "('move', 3)", "('move', 1)"])
    replies = ["('move', 0)", "('move', 3)", "('move', 1)"]
    windows = [(turn, history) for turn in range(4) for history in (1, 3)]
    contexts = [turn_context(frames, replies, t, history=h, size=7) for t, h in windows]
    cache = EncodingCache(encoder)
    cache.batch(contexts[:3])  # a first batch fills part of the cache
    encoded = []
    original = encoder.encode_each
    encoder.encode_each = lambda cs: encoded.extend(cs) or original(cs)
    try:
        batch = cache.batch(contexts)
    finally:
        del encoder.encode_each
    new = {c.key: c for c in reversed(contexts) if c.key not in {d.key for d in contexts[:3]}}
    assert encoded == sorted(new.values(), key=contexts.index)  # each context not seen before, once
    assert len(encoded) < len(contexts) - 3  # a repeated context (a move and its way back) was not
    texts = [encoder.prompt_text(c) for c in contexts]
    direct = encoder.processor(
        text=texts, images=[i for c in contexts for i in c.images], return_tensors="pt", padding=True
    )
    assert set(batch) == set(direct)
    for key in direct:
        assert torch.equal(batch[key], direct[key]), key
    assert (
        batch["attention_mask"].sum(1).unique().numel() > 1
    )  # prompts of several lengths: padding was exercised


def test_equal_context_keys_are_exactly_equal_messages_and_images():
    """Repeated turns are merged and shared by key: two contexts have one key exactly when
    their messages (PNG data URIs included) and images are equal."""
    moves = ["('move', 0)", "('move', 2)", "('move', 0)", "('move', 3)", "('move', 1)", "('move', 1)"]
    frames = _episode_frames(moves)
    contexts = [
        turn_context(frames, moves, turn, history=history, size=7)
        for turn in range(len(moves) + 1)
        for history in (1, 2)
    ]
    pairs = [(a, b) for a in contexts for b in contexts]
    for a, b in pairs:
        same = json.dumps(a.messages) == json.dumps(b.messages) and [i.tobytes() for i in a.images] == [
            i.tobytes() for i in b.images
        ]
        assert (a.key == b.key) == same
    assert sum(a.key == b.key for a, b in pairs) > len(contexts)  # some distinct turns share a context


@pytest.mark.parametrize("history", [1, 3])
def test_prompt_text_is_the_chat_template_of_the_real_messages(encoder, history):
    """The text is rendered once per distinct text from placeholder image parts; it must equal
    the template applied to the messages with their PNG data URIs."""
    replies = ["('move', 0)", "('move', 3)", "('move', 1)"]
    frames = _episode_frames(replies)
    for turn in range(4):
        context = turn_context(frames, replies, turn, history=history, size=7)
        real = encoder.processor.apply_chat_template(
            context.messages, add_generation_prompt=True, tokenize=False
        )
        assert encoder.prompt_text(context) == real
        assert "data:image/png" not in json.dumps(context.text_messages())
