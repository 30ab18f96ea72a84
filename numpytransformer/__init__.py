"""numpytransformer: the Transformer in pure NumPy, with hand-written backward passes."""
