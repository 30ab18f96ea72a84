"""The pure forward/backward pairs, one component a file, and their fast forms (fast.py)."""
