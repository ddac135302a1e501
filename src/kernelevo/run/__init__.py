"""One evolve run: put together from its settings, resumed, driven, and read back."""
