# analogy stage (see docs/design.md)
