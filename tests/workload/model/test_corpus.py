"""The tokenizer corpus holds the feedback the maze really sends, not a retyped copy of it."""

from __future__ import annotations

from workload.maze.conversation import MazeConversation
from workload.model.corpus import feedback_texts, prompt_corpus


def test_the_corpus_holds_every_feedback_text_the_maze_sends():
    env = MazeConversation(None, {"seed": 0, "max_turns": 10})
    env.init()
    replies = ("('move', 2)", "('move', 0)", "no action here", "('jump', 1)", "('move', 5)")
    sent = [env.step(reply)["metadata"]["env_feedback"] for reply in replies]
    assert len(set(sent)) == len(replies)  # a wall, a move, a parse failure, an unknown name, a bad payload
    assert set(sent) <= set(feedback_texts())
    corpus = set(prompt_corpus())
    assert all(text in corpus for text in feedback_texts())
