"""Modules (parameters and gradients around the pairs) and the models built from them."""
