"""packwise: sequence packing for LLM and VLM supervised fine-tuning."""

__version__ = "0.1.0"
