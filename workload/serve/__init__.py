"""The local OpenAI-compatible endpoint (Ray Serve, CPU, LoRA adapters from a folder) and the cluster Serve config."""
