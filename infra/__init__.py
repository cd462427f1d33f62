"""AWS CDK app: settings, stacks, constructs, lifecycle scripts and dashboards."""
