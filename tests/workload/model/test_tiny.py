"""The tiny Qwen3-VL: deterministic offline build, 1-token actions, small images, HF round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from workload.model.corpus import ACTION_STRINGS
from workload.model.tiny import (
    INITIALIZER_RANGE,
    build_tiny_model,
    build_tokenizer,
    load_tiny,
)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_tiny(tiny_model_dir)


def _frame(px: int = 64, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(px, px, 3), dtype=np.uint8))


def test_same_seed_builds_identical_files_and_another_seed_differs(tiny_model_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "processor_config.json"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (tiny_model_dir / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()


def test_unknown_preset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        build_tiny_model(tmp_path / "m", preset="huge")


def test_load_of_a_missing_directory_says_how_to_build_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="build it first"):
        load_tiny(tmp_path / "nothing")


def test_every_action_is_one_token_and_decodes_verbatim():
    tok = build_tokenizer()
    for action in ACTION_STRINGS:
        ids = tok.encode(action, add_special_tokens=False)
        assert len(ids) == 1, action
        assert tok.decode(ids) == action


def test_tokenizer_is_lossless_on_text_outside_the_corpus():
    tok = build_tokenizer()
    text = "Zebra quartz 42 ✓ — ('move', 7)"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_chat_template_is_qwen_format_with_a_vision_span(tiny):
    _, processor = tiny
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Go."}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert (
        text
        == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Go.<|im_end|>\n<|im_start|>assistant\n"
    )

def _one_frame_turn(processor):
    """One user turn of one 64 px frame and "Go.", as model inputs."""
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Go."}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    return processor(text=[text], images=[_frame()], return_tensors="pt")


def test_a_64px_frame_stays_4_image_tokens(tiny):
    model, processor = tiny
    batch = _one_frame_turn(processor)
    assert (batch["input_ids"] == model.config.image_token_id).sum().item() == 4
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert processor.tokenizer.padding_side == "left"


def test_config_uses_the_wide_initializer_and_weights_follow_it(tiny):
    model, _ = tiny
    assert model.config.text_config.initializer_range == INITIALIZER_RANGE
    assert model.config.vision_config.initializer_range == INITIALIZER_RANGE
    q_proj = model.model.language_model.layers[0].self_attn.q_proj.weight
    assert 0.07 < q_proj.std().item() < 0.13  # 0.02 would make the image invisible


def test_logits_depend_on_the_image(tiny):
    model, processor = tiny
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Go."}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    batch = processor(text=[text, text], images=[_frame(seed=1), _frame(seed=2)], return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits[:, -1]
    assert (logits[0] - logits[1]).abs().max().item() > 1e-3


def test_greedy_generate_runs_and_stops_within_the_budget(tiny):
    model, processor = tiny
    batch = _one_frame_turn(processor)
    out = model.generate(**batch, max_new_tokens=2, do_sample=False)
    assert out.shape == (1, batch["input_ids"].shape[1] + 2)


def test_processor_class_is_importable_by_name_and_reloads_the_saved_processor(tiny_model_dir):
    from workload.model.processor import ImageOnlyQwen3VLProcessor

    processor = ImageOnlyQwen3VLProcessor.from_pretrained(tiny_model_dir)
    assert isinstance(processor, ImageOnlyQwen3VLProcessor)
    assert processor.image_processor.size["shortest_edge"] == 32 * 32


def test_frames_are_padded_with_wall_gray_not_resized(tiny):
    from workload.model.processor import PAD_RGB

    _, processor = tiny
    frame = _frame(56)
    padded = Image.new("RGB", (64, 64), PAD_RGB)
    padded.paste(frame, (0, 0))
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Go."}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ours = processor(text=[text], images=[frame], return_tensors="pt")
    stock = processor.image_processor(images=[padded], return_tensors="pt")
    assert torch.equal(ours["pixel_values"], stock["pixel_values"])
    assert ours["image_grid_thw"].tolist() == [[1, 4, 4]]
