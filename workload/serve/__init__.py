"""OpenAI-compatible Ray Serve app with LoRA adapter multiplexing (local) and the cluster Serve config."""
