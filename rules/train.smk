# train stage (see docs/design.md)
