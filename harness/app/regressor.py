"""A scikit-learn regressor: ``HarnessRegressor(harness="default").fit(X, y).predict(X)``.

A real estimator (``BaseEstimator``, ``RegressorMixin``: ``get_params`` / ``set_params`` / ``clone``, R² ``score``,
sklearn's input validation and ``n_features_in_`` / ``feature_names_in_``), so it goes into pipelines and
``GridSearchCV``; ``tests/test_regressor_sklearn.py`` runs sklearn's ``check_estimator`` on it (the checks it
passes and why the others are left out are listed there). It wraps :meth:`FrozenHarness.solve` (a task built
from the arrays, the selected equation kept). What PySR users rely on is here with PySR's
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
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data


class HarnessRegressor(RegressorMixin, BaseEstimator):
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

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False  # a task's data must be finite (Task says which column is not)
        tags.non_deterministic = True  # the engines run against the clock: the same seed may end elsewhere
        return tags

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

        # sklearn's checks of shape, type and the fitted columns; finiteness is the task's (it names the column)
        X_arr, y_arr = validate_data(self, X, y, dtype=np.float64, y_numeric=True, ensure_min_samples=2,
                                     ensure_all_finite=False)
        names = _names(X, variable_names, X_arr.shape[1])
        safe: list[str] = []
        for n in names:
            safe.append(safe_identifier(str(n), safe + [target_name]))
        if isinstance(descriptions, dict):
            descriptions = [descriptions.get(n, "") for n in names]
        task = Task.from_arrays(
            X_arr, y_arr, name="user_data", input_names=safe,  # Task checks shape and dtype, with messages
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
        self.variable_names_ = list(task.input_names)  # NFKC-normalised, as expressions name them
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
        check_is_fitted(self, "solution_", msg="HarnessRegressor is not fitted yet; call fit(X, y) first")

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
        if hasattr(X, "columns") and hasattr(self, "feature_names_in_"):  # a DataFrame: the fitted columns, in order
            X = X[list(self.feature_names_in_)]
        X_arr = validate_data(self, X, dtype=np.float64, reset=False)
        if index is None and self.model_selection is None:
            return self.solution_.predict(X_arr)
        from harness.core.expression import parse_expression

        return parse_expression(self._equation(index), self.variable_names_)(X_arr)

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


def _names(X: Any, given: Sequence[str] | None, n_columns: int) -> list[str]:
    """The inputs' names: ``given``, else a DataFrame's columns, else x0..x{d-1}."""
    if given is not None:
        names = [str(n) for n in given]
    elif hasattr(X, "columns"):
        names = [str(c) for c in X.columns]
    else:
        names = [f"x{i}" for i in range(n_columns)]
    if len(names) != n_columns:
        raise ValueError(f"{len(names)} variable names for {n_columns} columns")
    return names
