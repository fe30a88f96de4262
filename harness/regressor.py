"""sklearn-style front end: ``HarnessRegressor(harness="default").fit(X, y).predict(X)``.

It only wraps :meth:`FrozenHarness.solve` (a task built from the arrays, the selected equation kept), so a
frozen harness is usable wherever a scikit-learn regressor is; ``equations_`` mirrors PySR's table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np


class HarnessRegressor:
    """Symbolic regression with a frozen harness.

    Args:
        harness: ``"default"``, a path to a harness JSON file, or a :class:`~harness.artifact.FrozenHarness`.
        llm: ``None`` (the harness's LLM settings), an ``LLMConfig``, a dict of LLMConfig fields, or a client.
        backend: SR engine override (``operon``, ``pysr``, ...); ``None`` keeps the harness's.
        budget: a ``harness.context.Budget`` or dict (max_llm_calls, max_solver_runs, max_seconds, max_tokens).
        seed: run seed (validation split, engine seeds).
        sr_settings: overrides of the harness's SR settings (e.g. ``{"time_budget": 5}``).
        run_dir: where the run's nodes.jsonl / result.json go (``None``: nothing written).
    """

    def __init__(
        self,
        harness: Any = "default",
        llm: Any = None,
        backend: str | None = None,
        budget: Any = None,
        seed: int = 0,
        sr_settings: dict[str, Any] | None = None,
        run_dir: str | os.PathLike | None = None,
    ):
        self.harness = harness
        self.llm = llm
        self.backend = backend
        self.budget = budget
        self.seed = seed
        self.sr_settings = sr_settings
        self.run_dir = run_dir

    # sklearn's clone()/GridSearchCV only need these two
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("harness", "llm", "backend", "budget", "seed", "sr_settings", "run_dir")}

    def set_params(self, **params: Any) -> "HarnessRegressor":
        for key, value in params.items():
            if key not in self.get_params():
                raise ValueError(f"unknown parameter {key!r}")
            setattr(self, key, value)
        return self

    def fit(
        self,
        X: Any,
        y: Any,
        variable_names: Sequence[str] | None = None,
        descriptions: Sequence[str] | dict[str, str] | None = None,
        target_name: str = "y",
        target_description: str = "",
    ) -> "HarnessRegressor":
        """Search an equation for y from X (array or DataFrame; a DataFrame's columns name the inputs)."""
        from harness.artifact import FrozenHarness
        from harness.task import Task, safe_identifier

        X_arr, names = _as_matrix(X, variable_names)
        safe: list[str] = []
        for n in names:
            safe.append(safe_identifier(str(n), safe + [target_name]))
        if isinstance(descriptions, dict):
            descriptions = [descriptions.get(n, "") for n in names]
        task = Task.from_arrays(
            X_arr, np.asarray(y), name="user_data", input_names=safe,  # Task checks shape and dtype, with messages
            input_descriptions=list(descriptions or []), target_name=target_name,
            target_description=target_description,
        )
        self.harness_ = FrozenHarness.resolve(self.harness)
        self.solution_ = self.harness_.solve(
            task, llm=self.llm, backend=self.backend, budget=self.budget, run_dir=self.run_dir, seed=self.seed,
            sr_settings=self.sr_settings,
        )
        if self.solution_.equation is None:
            raise RuntimeError(f"no usable equation found (status {self.solution_.status}; "
                               f"errors: {'; '.join(self.solution_.errors[:3]) or 'none'})")
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.variable_names_ = list(task.input_names)  # NFKC-normalised, as expressions name them
        self.n_features_in_ = len(names)
        self.equations_ = self.solution_.front
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "solution_"):
            raise RuntimeError("HarnessRegressor is not fitted yet; call fit(X, y) first")

    def predict(self, X: Any) -> np.ndarray:
        self._check_fitted()
        X_arr, _ = _as_matrix(X, None)
        if hasattr(X, "columns"):  # a DataFrame: reorder to the fitted columns
            X_arr = np.asarray(X[list(self.feature_names_in_)], dtype=float)
        if X_arr.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X_arr.shape[1]} columns, the model was fitted on {self.n_features_in_}")
        return self.solution_.predict(X_arr)

    def score(self, X: Any, y: Any) -> float:
        """R² of the predictions, as scikit-learn regressors define it."""
        y = np.asarray(y, dtype=float).ravel()
        pred = self.predict(X)
        ss_res = float(np.sum((y - pred) ** 2))
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)

    def sympy(self) -> Any:
        """The selected equation as a sympy expression over the (sanitised) input names."""
        self._check_fitted()
        return self.solution_.sympy

    def latex(self) -> str:
        self._check_fitted()
        return self.solution_.latex or ""

    @property
    def equation_(self) -> str:
        self._check_fitted()
        return self.solution_.equation or ""

    def __repr__(self) -> str:
        harness = self.harness if isinstance(self.harness, (str, Path)) else "FrozenHarness(...)"
        return f"HarnessRegressor(harness={harness!r}, backend={self.backend!r}, seed={self.seed})"


def _as_matrix(X: Any, names: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """(n, d) float array and column names (DataFrame columns, given names, or x0..x{d-1})."""
    if hasattr(X, "columns"):
        cols = [str(c) for c in X.columns]
        arr = np.asarray(X, dtype=float)
        names = list(names) if names is not None else cols
    else:
        arr = np.asarray(X, dtype=float)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        names = list(names) if names is not None else [f"x{i}" for i in range(arr.shape[1])]
    if arr.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {arr.shape}")
    if len(names) != arr.shape[1]:
        raise ValueError(f"{len(names)} variable names for {arr.shape[1]} columns")
    return arr, [str(n) for n in names]
