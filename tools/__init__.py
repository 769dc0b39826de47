"""Maintainer tools: not part of the `specgate` package and never imported by it."""
