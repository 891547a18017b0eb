"""Kernel-log scanner and fault catalog."""
