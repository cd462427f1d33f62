"""Held-out evaluation: strict metrics, reports, against an endpoint or an in-process policy."""
