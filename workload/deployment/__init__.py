"""Deployment settings: the profiles, their `-c key=value` overrides and the instance facts.

``settings`` validates a profile plus overrides into one frozen ``Settings``; ``fit`` holds the
instance facts and sizes the Ray pods from them. Pure Python (pydantic, no aws_cdk): `cdk deploy`,
the operations commands and the trainer image read the same models.
"""
