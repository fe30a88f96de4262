"""The application shell: frozen harness load/solve, the sklearn-style regressor, exports, the viewer and the CLIs.

The only part of ``harness`` that may import ``workflows``.
"""
