# tables stage (see docs/design.md)
