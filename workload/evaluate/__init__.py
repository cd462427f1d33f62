"""Held-out evaluation through an OpenAI-compatible endpoint, and the report it writes and prints."""
