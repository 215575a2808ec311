"""Idefics3 / SmolVLM vision-language models: SigLIP tiles, a pixel-shuffle connector and a Llama decoder."""
