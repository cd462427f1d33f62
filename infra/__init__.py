"""AWS CDK app: stacks, constructs, lifecycle scripts and dashboards (settings: workload.deployment)."""
