"""Families of Tensor methods, one module each; `Tensor` inherits them all (see fusegrad/tensor.py).

Methods here are written against the core Tensor (`self: Tensor`): they build on its primitives (elementwise ops,
reductions, movement ops) and never touch UOps directly unless a new primitive is needed.
"""
