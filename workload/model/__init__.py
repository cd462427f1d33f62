"""Qwen3-VL model and processor code shared by serving and the rehearsal (needs torch, not Ray or SkyRL)."""
