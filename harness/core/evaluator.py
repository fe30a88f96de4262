"""Metrics and constant fitting for candidate expressions.

Why in-process: LLM-SR style evaluators start a fresh Python process per candidate and fit with
BFGS and numeric gradients.  Candidates here are already whitelisted :class:`Expression`
objects, so they are fitted in-process with ``least_squares`` and an analytic Jacobian, which is
both faster and recovers constants to near machine precision on noise-free data.

Relative-accuracy convention (``acc_tau``, ``acc_all_tau``, ``frac_within_tau``): a point is
within tau when ``|yhat - y| / |y| < tau``.  Points with ``|y| <= 1e-8 * scale`` (``scale`` =
median ``|y|`` of finite targets, or 1 when that is 0) would make the ratio meaningless, so they
are judged by the absolute test ``|yhat - y| < tau * scale``.  Non-finite predictions are never
within tau.  ``acc_tau`` is 1.0 when at least 95% of points are within tau.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, minimize

from harness.core.expression import Expression

__all__ = ["compute_metrics", "FitResult", "fit", "score"]

ACC_FRACTION = 0.95
NEAR_ZERO = 1e-8
_PENALTY = 1e50  # residual used in place of nan/inf so optimisers back away from them
# (method, x_scale) cycled over the starts: the methods fail on different problems.
_PORTFOLIO: list[tuple[str, object]] = [("lm", 1.0), ("trf", 1.0), ("dogbox", "jac"), ("trf", "jac")]
_MAX_NFEV = 100  # per start; a start that has not converged by then rarely will
# Above this many rows the starts are searched on a seeded subsample and the best point is polished on all rows.
SUBSAMPLE_ROWS = 2000


def _tau_key(tau: float) -> str:
    return format(tau, "g")


def compute_metrics(y_true: np.ndarray, y_pred: np.ndarray, *, taus: Sequence[float] = (0.1, 0.01, 0.001),
                    complexity: int | None = None) -> dict[str, float]:
    """mse, nmse, r2 and tau-accuracies; nan/inf predictions count as failures."""
    y = np.asarray(y_true, dtype=np.float64).ravel()
    yp = np.asarray(y_pred, dtype=np.float64).ravel()
    if yp.size == 1 and y.size != 1:
        yp = np.full_like(y, yp[0])
    if y.shape != yp.shape:
        raise ValueError(f"y_true has shape {y.shape} but y_pred has shape {yp.shape}")
    n = int(y.size)
    finite = np.isfinite(yp)
    n_valid = int(finite.sum())
    out: dict[str, float] = {}
    with np.errstate(all="ignore"):
        if n == 0:
            mse = nmse = float("nan")
        elif n_valid < n:
            mse = nmse = float("inf")
        else:
            mse = float(np.mean((yp - y) ** 2))
            var = float(np.var(y))
            nmse = mse / var if var > 0 else (0.0 if mse == 0 else float("inf"))
        out["mse"], out["nmse"], out["r2"] = mse, nmse, 1.0 - nmse
        abs_y = np.abs(y)
        finite_y = abs_y[np.isfinite(abs_y)]
        scale = float(np.median(finite_y)) if finite_y.size else 1.0
        scale = scale if scale > 0 else 1.0
        near_zero = abs_y <= NEAR_ZERO * scale
        err = np.abs(yp - y)
        rel = np.where(near_zero, err / scale, err / np.where(near_zero, 1.0, abs_y))
        for tau in taus:
            within = finite & (rel < tau)
            frac = float(within.mean()) if n else 0.0
            key = _tau_key(tau)
            out[f"acc_{key}"] = 1.0 if n and frac >= ACC_FRACTION else 0.0
            out[f"acc_all_{key}"] = 1.0 if n and bool(within.all()) else 0.0
            out[f"frac_within_{key}"] = frac
    out["n"] = n
    out["n_valid"] = n_valid
    out["complexity"] = float(complexity) if complexity is not None else float("nan")
    return out


def score(expression: Expression, params: Sequence[float] | np.ndarray | None, X: np.ndarray,
          y: np.ndarray) -> dict[str, float]:
    """compute_metrics of the expression's predictions, with its complexity."""
    return compute_metrics(y, expression(X, params), complexity=expression.complexity)


@dataclass
class FitResult:
    params: np.ndarray
    metrics: dict
    status: str  # ok | no_params | failed | timeout | nonfinite
    message: str = ""
    n_evaluations: int = 0
    seconds: float = 0.0
    starts: list[float] = field(default_factory=list)  # final cost of each start, for diagnostics


class _Deadline(Exception):
    """Raised inside the residual function when the wall-clock cap is reached."""


class _Objective:
    """Weighted residuals and Jacobian on pre-split columns; remembers the best point seen."""

    def __init__(self, expression: Expression, X: np.ndarray, y: np.ndarray, loss: str, deadline: float):
        self.expr = expression
        self.cols = Expression.columns(X, len(expression.variables))
        self.y = y
        if loss == "mse":
            self.w = None
        elif loss == "relative":
            abs_y = np.abs(y)
            scale = float(np.median(abs_y)) if abs_y.size else 1.0
            self.w = 1.0 / np.maximum(abs_y, NEAR_ZERO * (scale if scale > 0 else 1.0))
        else:
            raise ValueError(f"loss must be 'mse' or 'relative', got {loss!r}")
        self.deadline = deadline
        self.n_eval = 0
        self.n_jac = 0
        self.best_key: tuple[int, float] = (y.size + 1, np.inf)
        self.best_p: np.ndarray | None = None
        self.has_jac = expression.jacobian([c[:1] for c in self.cols], expression.initial_params, n=1) is not None

    def residuals(self, p: np.ndarray) -> np.ndarray:
        if self.n_eval and time.perf_counter() > self.deadline:
            raise _Deadline()
        self.n_eval += 1
        r = self.expr.evaluate(self.cols, p, n=self.y.size) - self.y
        if self.w is not None:
            r *= self.w
        bad = ~np.isfinite(r)
        n_bad = int(bad.sum())
        if n_bad:
            r[bad] = 0.0
        key = (n_bad, float(r @ r))  # fewest non-finite rows first, then least squares
        if n_bad:
            r[bad] = _PENALTY
        if key < self.best_key:
            self.best_key, self.best_p = key, np.array(p, dtype=np.float64)
        return r

    @property
    def best_cost(self) -> float:
        """Sum of squared (weighted) residuals at the best point; inf if it has non-finite rows."""
        return self.best_key[1] if self.best_key[0] == 0 else np.inf

    def jac(self, p: np.ndarray) -> np.ndarray:
        self.n_jac += 1
        J = self.expr.jacobian(self.cols, p, n=self.y.size)
        if J is None:
            J = np.zeros((self.y.size, self.expr.n_params))
        if self.w is not None:
            J *= self.w[:, None]
        J[~np.isfinite(J)] = 0.0
        return J

    def cost(self, p: np.ndarray) -> float:
        r = self.residuals(p)
        return float(r @ r)


def _starts(p0: np.ndarray, n_starts: int, seed: int) -> list[np.ndarray]:
    """First start is the expression's own; others perturb it log-uniformly (x0.1..x10),
    flip signs now and then, and every third is a plain normal draw."""
    rng = np.random.default_rng(seed)
    out = [p0.copy()]
    mag = np.where(p0 != 0, np.abs(p0), 1.0)
    sign = np.where(p0 < 0, -1.0, 1.0)
    for k in range(1, max(n_starts, 1)):
        if k % 3 == 0:
            out.append(rng.normal(0.0, 1.0, p0.size) * mag)
        else:
            flip = np.where(rng.random(p0.size) < 0.2, -1.0, 1.0)
            out.append(sign * flip * mag * 10.0 ** rng.uniform(-1.0, 1.0, p0.size))
    return out


def fit(expression: Expression, X: np.ndarray, y: np.ndarray, *, n_starts: int = 4, seed: int = 0,
        max_seconds: float = 2.0, loss: str = "mse") -> FitResult:
    """Fit the free parameters (see :func:`_fit`); overflow inside the optimiser stays quiet.

    Why: a wild start overflows in SciPy's own dot products; numpy's error state (thread-local) silences
    those warnings, while the non-finite values themselves are still handled and reported by status.
    """
    with np.errstate(all="ignore"):
        return _fit(expression, X, y, n_starts=n_starts, seed=seed, max_seconds=max_seconds, loss=loss)


def _fit(expression: Expression, X: np.ndarray, y: np.ndarray, *, n_starts: int, seed: int,
         max_seconds: float, loss: str) -> FitResult:
    """Fit the free parameters by least squares from several seeded starts, within max_seconds.

    Starts: ``expression.initial_params`` first, then seeded perturbations of it; the solver
    (lm / trf / dogbox) alternates between starts because each fails on different problems.
    Stops early once the fit is exact.  Status: "ok"; "no_params" (only scored); "timeout"
    (the cap cut the search short; the best point seen is returned); "nonfinite" (the best
    point still predicts nan/inf on some rows); "failed" (no start could be evaluated).
    Metrics are always on all rows of (X, y).
    """
    t0 = time.perf_counter()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).ravel()
    if expression.n_params == 0:
        metrics = score(expression, None, X, y)
        return FitResult(np.zeros(0), metrics, "no_params", "nothing to fit", 1, time.perf_counter() - t0)

    deadline = t0 + max_seconds
    obj = _Objective(expression, X, y, loss, deadline)
    if y.size > SUBSAMPLE_ROWS:
        # Search the starts on a seeded subsample (each evaluation ~5x cheaper), then polish the best point on
        # all rows: the full-data optimum is one or two Gauss-Newton steps away, and metrics use every row.
        idx = np.sort(np.random.default_rng(seed).choice(y.size, SUBSAMPLE_ROWS, replace=False))
        sub = _Objective(expression, X[idx], y[idx], loss, deadline)
        timed_out, errors, costs = _multistart(sub, expression, n_starts, seed)
        if sub.best_p is not None and not timed_out:
            timed_out = _polish(obj, sub.best_p, errors)
        if sub.best_p is not None and obj.best_p is None:  # out of time before the polish: keep the best seen
            obj.n_eval = 0  # one evaluation past the deadline, to score that point on all rows
            obj.residuals(sub.best_p)
        if not timed_out and not np.isfinite(obj.best_cost):  # the subsample misled us: search on all rows
            more_timed_out, more_errors, more_costs = _multistart(obj, expression, n_starts, seed)
            timed_out, errors, costs = more_timed_out, errors + more_errors, costs + more_costs
    else:
        timed_out, errors, costs = _multistart(obj, expression, n_starts, seed)

    if not timed_out and (not np.isfinite(obj.best_cost) or len(errors) == len(costs)):
        timed_out = _fallback(obj, expression.initial_params, errors)

    seconds = time.perf_counter() - t0
    if obj.best_p is None:
        metrics = score(expression, None, X, y)
        return FitResult(expression.initial_params.copy(), metrics, "failed", "; ".join(errors) or "no evaluation",
                         obj.n_eval, seconds, costs)
    params = obj.best_p
    metrics = compute_metrics(y, expression.evaluate(obj.cols, params, n=y.size), complexity=expression.complexity)
    if metrics["n_valid"] < metrics["n"]:
        status = "nonfinite"
    elif timed_out:
        status = "timeout"
    else:
        status = "ok"
    message = f"{len(costs)} start(s), {obj.n_jac} jacobian evaluations" + (
        "" if obj.has_jac else ", finite-difference jacobian")
    if errors:
        message += "; " + "; ".join(errors[:3])
    return FitResult(params, metrics, status, message, obj.n_eval, seconds, costs)


def _multistart(obj: _Objective, expression: Expression, n_starts: int, seed: int
                ) -> tuple[bool, list[str], list[float]]:
    """Least squares from each seeded start until the fit is exact or time runs out.

    Returns (timed_out, errors, final cost per start); the best point is kept by ``obj``.
    """
    # Stop early once the fit is exact to ~1e-12 relative: more starts cannot improve it.
    target = 1e-24 * max(float(np.sum((obj.y if obj.w is None else obj.y * obj.w) ** 2)), 1e-300)
    jac = obj.jac if obj.has_jac else "2-point"
    timed_out, errors, costs = False, [], []
    for k, p_start in enumerate(_starts(expression.initial_params, n_starts, seed)):
        if k and time.perf_counter() > obj.deadline:
            timed_out = True
            break
        method, x_scale = _PORTFOLIO[k % len(_PORTFOLIO)]
        if method == "lm" and obj.y.size < expression.n_params:
            method = "trf"
        try:
            # 'lm' counts finite-difference evaluations in max_nfev, the others do not
            max_nfev = _MAX_NFEV * (expression.n_params + 1 if method == "lm" and not obj.has_jac else 1)
            res = least_squares(obj.residuals, p_start, jac=jac, method=method, x_scale=x_scale,
                                ftol=1e-14, xtol=1e-14, gtol=1e-14, max_nfev=max_nfev)
            costs.append(float(2 * res.cost))
        except _Deadline:
            timed_out = True
            break
        except Exception as exc:  # e.g. non-finite start, singular steps
            errors.append(f"start {k}: {type(exc).__name__}: {exc}")
            costs.append(float("inf"))
        if obj.best_cost <= target:
            break
    return timed_out, errors, costs


def _polish(obj: _Objective, start: np.ndarray, errors: list[str]) -> bool:
    """One least-squares run on all rows from ``start``; returns True if the time cap stopped it."""
    jac = obj.jac if obj.has_jac else "2-point"
    method = "lm" if obj.y.size >= start.size else "trf"
    max_nfev = _MAX_NFEV * (start.size + 1 if method == "lm" and not obj.has_jac else 1)
    try:
        least_squares(obj.residuals, start, jac=jac, method=method, x_scale="jac",
                      ftol=1e-14, xtol=1e-14, gtol=1e-14, max_nfev=max_nfev)
    except _Deadline:
        return True
    except Exception as exc:
        errors.append(f"polish: {type(exc).__name__}: {exc}")
        obj.residuals(start)  # at least score the subsample's best point on all rows
    return False


def _fallback(obj: _Objective, p0: np.ndarray, errors: list[str]) -> bool:
    """Derivative-free Nelder-Mead for when least squares raised on every start or found no
    point with finite predictions; returns True if the time cap stopped it."""
    start = obj.best_p if obj.best_p is not None else p0
    try:
        minimize(obj.cost, start, method="Nelder-Mead",
                 options={"maxfev": 400 * (p0.size + 1), "xatol": 1e-12, "fatol": 1e-14})
    except _Deadline:
        errors.append("fallback Nelder-Mead hit the time cap")
        return True
    except Exception as exc:
        errors.append(f"fallback: {type(exc).__name__}: {exc}")
    return False
