"""The one place the version is written; pyproject.toml and every module read it from here.

A leaf: a module that needs the version imports this, never the package
root, whose lazy API would tie it into a cycle.
"""

__version__ = "0.1.0"
