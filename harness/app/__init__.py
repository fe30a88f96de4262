"""The application shell: frozen harness load/solve, the scikit-learn regressor, exports, the viewer and the CLIs.

The only part of ``harness`` that may import ``workflows``.
"""
