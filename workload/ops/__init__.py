"""AWS operations: deploy, teardown, cost, plan (no CLI here)."""
