"""The node agent: runs checks, keeps strikes on its own Node, fences it."""
