#!/usr/bin/env python3
"""CDK entry point: reads settings once and composes the stacks (nothing else)."""

import aws_cdk as cdk

app = cdk.App()
app.synth()
