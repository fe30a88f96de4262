"""The engine: expressions, fitting and metrics, tasks, candidates and the run context. Imports nothing of ours above it."""
