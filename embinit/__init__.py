"""Reproduction of 'On Initializing Transformers with Pre-trained Embeddings' (arXiv 2407.12514)."""
