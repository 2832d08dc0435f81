# embeddings stage (see docs/design.md)
