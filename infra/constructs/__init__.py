"""Reusable constructs, one concern a module."""
