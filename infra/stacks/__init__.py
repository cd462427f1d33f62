"""One deployable unit a module."""
