"""The ``skymaze`` command: one module a command group, each exposing ``register(app)``."""
