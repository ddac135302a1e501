"""CUDA candidates: load_inline builds, cached, instrumented and checked."""
