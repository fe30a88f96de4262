"""Loaders that turn benchmark files (or the built-in generator) into validated :class:`harness.core.task.Task` objects."""
