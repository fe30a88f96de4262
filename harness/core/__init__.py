"""The core: expressions, fitting and metrics, tasks, candidates and the run context; the layer everything else
stands on. Imports nothing of ours above it. (The SR engines - Operon, PySR - are `harness.sr`'s backends.)"""
