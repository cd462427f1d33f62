"""Qwen3-VL's processor without the video slot, and the frame padding it applies.

``ImageOnlyQwen3VLProcessor`` is Qwen3-VL's processor minus the video processor (the stock
one needs torchvision), with a small minimum pixel count: a 64 px frame stays 4 image
tokens instead of being upscaled to Qwen's 65,536 px minimum. Frames are padded to whole
merged patches instead of resized, so maze cells stay pixel-exact. The serving engine and
the rehearsal load every model directory's processor through this class.
"""

from __future__ import annotations

from typing import Any

from workload.maze.render import WALL_RGB

PATCH_SIZE = 16  # px per side of a Qwen3-VL vision patch (its vision_config.patch_size)
MERGE_SIZE = 2  # 2x2 patches merge into one image token (vision_config.spatial_merge_size)
TEMPORAL_PATCH_SIZE = 2
MIN_PIXELS = (PATCH_SIZE * MERGE_SIZE) ** 2  # one merged token: 32x32 px, never upscale small frames
MAX_PIXELS = 256 * 256
PAD_RGB = WALL_RGB  # padding reads as more wall

# Qwen-format chat template: string or list content; image parts become the vision span.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def pad_to_patch_grid(image: Any) -> Any:
    """``image`` (PIL) padded right and bottom with ``PAD_RGB`` to a multiple of 32 px."""
    from PIL import Image

    unit = PATCH_SIZE * MERGE_SIZE
    width, height = image.size
    padded = (-(-width // unit) * unit, -(-height // unit) * unit)
    if padded == (width, height):
        return image
    canvas = Image.new("RGB", padded, PAD_RGB)
    canvas.paste(image.convert("RGB"), (0, 0))
    return canvas


def _processor_class() -> type:
    from transformers import Qwen3VLProcessor

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
        """Qwen3-VL processor without the video slot (the stock one requires torchvision).

        ProcessorMixin reads its sub-processors from this ``__init__`` signature.
        Reload with ``ImageOnlyQwen3VLProcessor.from_pretrained(dir)``: ``AutoProcessor``
        cannot resolve the subclass and silently returns only the tokenizer.
        """

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(
                image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template, **kwargs
            )

        def __call__(self, images=None, text=None, **kwargs):
            # Pad frames to whole merged patches instead of letting the image processor
            # resize them: 8 px maze cells stay pixel-exact, 2x2 cells per 16 px patch.
            if images is not None:
                single = not isinstance(images, list | tuple)
                images = [pad_to_patch_grid(image) for image in ([images] if single else images)]
            return super().__call__(images=images, text=text, **kwargs)

    ImageOnlyQwen3VLProcessor.__module__ = __name__
    ImageOnlyQwen3VLProcessor.__qualname__ = "ImageOnlyQwen3VLProcessor"
    return ImageOnlyQwen3VLProcessor


def build_processor(tokenizer: Any) -> Any:
    """Image-only processor over ``tokenizer`` with a small minimum pixel count."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    image_processor = Qwen2VLImageProcessorPil(
        patch_size=PATCH_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
        size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return processor_class()(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def processor_class() -> type:
    """``ImageOnlyQwen3VLProcessor``, defined on first use so importing this module stays light."""
    return __getattr__("ImageOnlyQwen3VLProcessor")


def __getattr__(name: str) -> Any:
    # The processor class subclasses transformers; build it on first use so importing this
    # module stays light (the CLI imports it for --help).
    if name == "ImageOnlyQwen3VLProcessor":
        cls = _processor_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
