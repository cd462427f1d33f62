"""An inference client for SkyRL's VLM generator that answers from a script instead of vLLM.

It implements the calls ``SkyRLVLMGymGenerator`` makes on its ``RemoteInferenceClient``
(SkyRL 0.4.0): ``render_chat_completion`` (vLLM's ``/v1/chat/completions/render``: the
conversation through the model's chat template into token ids), ``generate`` (one reply
for the rendered ids) and ``finish_session``. Rendering uses the tiny model's real
tokenizer and chat template; image features are left out (vLLM serialises them with its
own codec, and no vLLM is installed here), so trajectories carry no pixel values.

The script: each conversation is recognised by its first frame. Mazes listed in
``solve`` get the optimal action sequence, one action a turn; every other maze gets
``('stop', 'stop')`` at once, which ends the episode off the goal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STOP_REPLY = "<action>('stop', 'stop')</action>"


def first_image_url(conversation: list[dict[str, Any]]) -> str:
    """The data URI of the first image in a conversation (the maze's initial frame)."""
    for message in conversation:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type") == "image_url":
                    return part["image_url"]["url"]
    raise AssertionError("the env's first message carries no image")


class ScriptedInferenceClient:
    """Answers SkyRL's generator from a script keyed by each maze's first frame."""

    model_name = "tiny-qwen3vl"

    def __init__(self, tokenizer: Any, scripts: Mapping[str, list[str]]) -> None:
        self.tokenizer = tokenizer
        self.scripts = dict(scripts)
        self._last_rendered: list[dict[str, Any]] | None = None
        self.finished_sessions: list[str] = []
        self.generate_calls = 0
        self.render_calls = 0

    def _ids(self, conversation: list[dict[str, Any]]) -> list[int]:
        return list(self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True,
                                                       return_dict=False))

    async def render_chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        conversation = request_payload["json"]["messages"]
        self.render_calls += 1
        self._last_rendered = conversation
        return {"token_ids": self._ids(conversation), "features": None}

    async def generate(self, engine_input: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        self.generate_calls += 1
        # The generator renders and then generates for one trajectory without yielding in
        # between (these coroutines never suspend), so the last render is this request's.
        conversation = self._last_rendered
        assert conversation is not None and self._ids(conversation) == engine_input["prompt_token_ids"][0]
        turn = sum(1 for message in conversation if message["role"] == "assistant")
        actions = self.scripts.get(first_image_url(conversation))
        text = f"<action>{actions[turn]}</action>" if actions and turn < len(actions) else STOP_REPLY
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return {"responses": [text], "response_ids": [ids], "stop_reasons": ["stop"], "response_logprobs": None}

    async def finish_session(self, session_id: Any) -> None:
        self.finished_sessions.append(str(session_id))
