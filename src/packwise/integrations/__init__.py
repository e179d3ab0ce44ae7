"""Integrations with training stacks: PyTorch data loading, Hugging Face, Megatron-Energon, Ray."""
