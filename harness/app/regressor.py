"""sklearn-style front end: ``HarnessRegressor(harness="default").fit(X, y).predict(X)``.

It only wraps :meth:`FrozenHarness.solve` (a task built from the arrays, the selected equation kept), so a
frozen harness is usable wherever a scikit-learn regressor is. What PySR users rely on is here with PySR's
meanings: ``equations_`` (the Pareto front), ``model_selection`` ("accuracy", "best", "score"; ``None`` keeps the
harness's own rule), ``warm_start`` (the next ``fit`` starts from the previous front), ``sympy()``, ``latex()``,
``latex_table()``, ``jax()``, ``pytorch()`` (each takes ``index=`` for another row of the front) and
``from_file(run_directory)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np


class HarnessRegressor:
    """Symbolic regression with a frozen harness.

    Args:
        harness: ``"default"``, a path to a harness JSON file, or a :class:`~harness.app.artifact.FrozenHarness`.
        llm: ``None`` (the harness's LLM settings), an ``LLMConfig``, a dict of LLMConfig fields, or a client.
        backend: SR engine override (``operon``, ``pysr``, ...); ``None`` keeps the harness's.
        budget: a ``harness.core.context.Budget`` or dict (max_llm_calls, max_solver_runs, max_seconds, max_tokens).
        seed: run seed (validation split, engine seeds).
        sr_settings: overrides of the harness's SR settings (e.g. ``{"time_budget": 5}``).
        run_dir: where the run's nodes.jsonl / result.json go (``None``: nothing written).
        model_selection: which equation of the front ``predict`` and the exports use: ``None`` (the harness's
            selection), ``"accuracy"`` (lowest loss), ``"score"`` (highest score), ``"best"`` (highest score among
            equations with loss within 1.5x of the lowest); loss = validation NMSE.
        warm_start: if True and already fitted, the next ``fit`` refits the previous front on the new data and
            seeds it into the search.
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
        model_selection: str | None = None,
        warm_start: bool = False,
    ):
        self.harness = harness
        self.llm = llm
        self.backend = backend
        self.budget = budget
        self.seed = seed
        self.sr_settings = sr_settings
        self.run_dir = run_dir
        self.model_selection = model_selection
        self.warm_start = warm_start

    PARAMS = ("harness", "llm", "backend", "budget", "seed", "sr_settings", "run_dir", "model_selection", "warm_start")

    # sklearn's clone()/GridSearchCV only need these two
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.PARAMS}

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
        from harness.app.artifact import FrozenHarness
        from harness.core.task import Task, safe_identifier

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
        if self.model_selection is not None:
            from harness.app.export import MODEL_SELECTIONS

            if self.model_selection not in MODEL_SELECTIONS:
                raise ValueError(f"model_selection must be None or one of {MODEL_SELECTIONS}, "
                                 f"got {self.model_selection!r}")
        previous = []
        if self.warm_start and getattr(self, "equations_", None) is not None and len(self.equations_):
            previous = self._renamed_front_equations(safe)
        self.harness_ = FrozenHarness.resolve(self.harness)
        self.solution_ = self.harness_.solve(
            task, llm=self.llm, backend=self.backend, budget=self.budget, run_dir=self.run_dir, seed=self.seed,
            sr_settings=self.sr_settings, warm_start=previous,
        )
        self.warm_started_from_ = previous
        if self.solution_.equation is None:
            raise RuntimeError(f"no usable equation found (status {self.solution_.status}; "
                               f"errors: {'; '.join(self.solution_.errors[:3]) or 'none'})")
        self.feature_names_in_ = np.asarray(names, dtype=object)
        self.variable_names_ = list(task.input_names)  # NFKC-normalised, as expressions name them
        self.n_features_in_ = len(names)
        self.equations_ = self.solution_.front
        return self

    def _renamed_front_equations(self, names: list[str]) -> list[str]:
        """The previous front's equations, over this fit's variable names (same columns, maybe renamed)."""
        old = list(getattr(self, "variable_names_", []))
        if len(old) != len(names):
            raise ValueError(f"warm_start: the previous fit had {len(old)} inputs, this one {len(names)}")
        from harness.core.expression import parse_expression

        out = []
        for equation in self.equations_["equation"]:
            expr = parse_expression(str(equation), old)
            out.append(expr.to_string(names=dict(zip(old, names))))
        return out

    def _check_fitted(self) -> None:
        if not hasattr(self, "solution_"):
            raise RuntimeError("HarnessRegressor is not fitted yet; call fit(X, y) first")

    def get_best(self, index: int | None = None) -> dict[str, Any]:
        """The chosen row of ``equations_`` (by ``index``, else ``model_selection``, else the harness's choice)."""
        self._check_fitted()
        front = self.equations_
        if index is None and self.model_selection is not None:
            from harness.app.export import select_index

            index = select_index(front, self.model_selection)
        if index is None:
            return {"equation": self.solution_.equation, "complexity": self.solution_.complexity,
                    "loss": self.solution_.metrics.get("valid", {}).get("nmse")}
        if not -len(front) <= index < len(front):
            raise IndexError(f"index {index} is outside the front ({len(front)} equations)")
        return dict(front.iloc[index])

    def _equation(self, index: int | None) -> str:
        equation = self.get_best(index)["equation"]
        if not equation:
            raise RuntimeError("the solve found no usable equation")
        return str(equation)

    def predict(self, X: Any, index: int | None = None) -> np.ndarray:
        self._check_fitted()
        X_arr, _ = _as_matrix(X, None)
        if hasattr(X, "columns"):  # a DataFrame: reorder to the fitted columns
            X_arr = np.asarray(X[list(self.feature_names_in_)], dtype=float)
        if X_arr.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X_arr.shape[1]} columns, the model was fitted on {self.n_features_in_}")
        if index is None and self.model_selection is None:
            return self.solution_.predict(X_arr)
        from harness.core.expression import parse_expression

        return parse_expression(self._equation(index), self.variable_names_)(X_arr)

    def score(self, X: Any, y: Any) -> float:
        """R² of the predictions, as scikit-learn regressors define it."""
        y = np.asarray(y, dtype=float).ravel()
        pred = self.predict(X)
        ss_res = float(np.sum((y - pred) ** 2))
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)

    def sympy(self, index: int | None = None) -> Any:
        """The chosen equation as a sympy expression over the (sanitised) input names."""
        from harness.core.expression import parse_expression

        return parse_expression(self._equation(index), self.variable_names_).sympy

    def latex(self, index: int | None = None, precision: int = 3) -> str:
        import sympy

        expr = self.sympy(index)
        return sympy.latex(expr.xreplace({f: sympy.Float(f, precision) for f in expr.atoms(sympy.Float)}))

    def latex_table(self, indices: Sequence[int] | None = None, precision: int = 3,
                    columns: Sequence[str] = ("equation", "complexity", "loss")) -> str:
        """The front (or rows ``indices``) as a LaTeX table, as PySR's ``latex_table`` (needs booktabs)."""
        from harness.app.export import latex_table

        self._check_fitted()
        return latex_table(self.equations_, self.variable_names_, indices=indices, precision=precision,
                           columns=columns)

    def jax(self, index: int | None = None) -> dict[str, Any]:
        """``{"callable": f(X, parameters), "parameters": ...}`` for the chosen equation (needs jax)."""
        from harness.app.export import jax_function

        return jax_function(self._equation(index), self.variable_names_)

    def pytorch(self, index: int | None = None) -> Any:
        """A ``torch.nn.Module`` computing the chosen equation, its constants trainable (needs torch)."""
        from harness.app.export import torch_module

        return torch_module(self._equation(index), self.variable_names_)

    @classmethod
    def from_file(cls, run_directory: str | os.PathLike, **params: Any) -> "HarnessRegressor":
        """A fitted regressor back from a solve's run folder (its ``result.json``), without solving again."""
        import json

        from harness.app.solution import Solution

        folder = Path(run_directory)
        path = folder / "result.json" if folder.is_dir() else folder
        if not path.exists():
            raise FileNotFoundError(f"no result.json in {folder}: pass the run folder of a solve")
        record = json.loads(path.read_text(encoding="utf-8"))
        model = cls(**params)  # run_dir stays as given: a later fit must not overwrite the folder it was read from
        model.loaded_from_ = path.parent
        model.solution_ = Solution.from_record(record, run_dir=path.parent)
        names = list(model.solution_.input_names)
        model.feature_names_in_ = np.asarray(names, dtype=object)
        model.variable_names_ = names
        model.n_features_in_ = len(names)
        model.equations_ = model.solution_.front
        return model

    @property
    def equation_(self) -> str:
        self._check_fitted()
        return self._equation(None) if (self.solution_.equation or self.model_selection) else ""

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
