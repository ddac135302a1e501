"""Model in, faster model out: profile a model, extract its hot submodules as tasks,
put kernels back as torch.library custom ops, verify end to end (docs/model.md).

Modules by concept: `contract` (loading MODEL.py), `profile`, `extract`, `swap`
(the custom op and its guard), `apply`, `verify`, `report`, `optimize` (the loop).
The package imports nothing heavy until a function is called.
"""
