"""Built-in LSR-Synth-like tasks: nothing to download, seeded and deterministic.

Like LLM-SRBench's LSR-Synth, each equation is a well-known term of its field plus one or two unusual synthetic
terms, so a model cannot simply recall it. Four domains, named and ordered as in LLM-SRBench:

- ``phys_osc``  (physics):   ``dv_dt`` of a damped / driven nonlinear oscillator, inputs ``x, t, v``
- ``chem_react`` (chemistry): ``dA_dt`` of a reaction-kinetics law, inputs ``t, A``
- ``bio_pop_growth`` (biology): ``dP_dt`` of a population-growth law, inputs ``t, P``
- ``matsci`` (materials):    stress ``sigma`` from strain ``epsilon`` and temperature ``T``

The three dynamics domains are integrated with ``solve_ivp`` (DOP853, rtol 1e-10, atol 1e-12) so the inputs lie on
real trajectories; the target is the right-hand side at each state, so the ground truth is exact on every split.
Train and the in-domain test are disjoint random times of an early window, the OOD test a later window.
Materials sample (epsilon, T) uniformly; OOD is a higher strain and temperature box.

Constants are drawn per task from seeded ranges and rounded to 3 significant digits, and written into the ground
truth as numbers. A draw whose trajectory blows up or whose target is degenerate is redrawn (next attempt seed).
Templates are split into two disjoint halves (even / odd positions) so a harness can be tuned on ``split="train"``
and evaluated on structurally different ``split="test"`` equations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
from scipy.integrate import solve_ivp

from harness.core.task import Split, Task, TaskError

RTOL, ATOL = 1e-10, 1e-12
MAX_STATE = 1e4  # trajectories leaving this box are treated as blown up
MAX_ATTEMPTS = 8
MIN_OOD_SPREAD = 0.02  # OOD target std must be at least this fraction of the train target std

sin, cos, exp, log, sqrt, tanh = np.sin, np.cos, np.exp, np.log, np.sqrt, np.tanh


@dataclass(frozen=True)
class Template:
    """``formula`` uses ``{c0}``.. placeholders; ``fn(c, *inputs)`` is the same formula in numpy (tests check both)."""

    formula: str
    fn: Callable[..., np.ndarray]
    ranges: tuple[tuple[float, float], ...]
    note: str


@dataclass(frozen=True)
class Domain:
    key: str
    label: str
    inputs: tuple[str, ...]
    descriptions: tuple[str, ...]
    target: str
    target_description: str
    templates: tuple[Template, ...]
    window_id: tuple[float, float] | tuple[tuple[float, float], ...]
    window_ood: tuple[float, float] | tuple[tuple[float, float], ...]
    dynamic: bool = True


T = Template
PHYS = Domain(
    key="phys_osc",
    label="physics",
    inputs=("x", "t", "v"),
    descriptions=("position at time t", "time", "velocity at time t"),
    target="dv_dt",
    target_description="acceleration a = dv/dt of a nonlinear damped oscillator",
    window_id=(0.0, 10.0),
    window_ood=(10.0, 15.0),
    templates=(
        T("-{c0}*x - {c1}*v + {c2}*sin({c3}*t) - {c4}*x**3",
          lambda c, x, t, v: -c[0] * x - c[1] * v + c[2] * sin(c[3] * t) - c[4] * x**3,
          ((0.5, 2.0), (0.05, 0.3), (0.2, 1.0), (0.5, 2.0), (0.1, 1.0)), "driven Duffing oscillator"),
        T("-{c0}*x - {c1}*v*abs(v) + {c2}*x*cos({c3}*t)",
          lambda c, x, t, v: -c[0] * x - c[1] * v * np.abs(v) + c[2] * x * cos(c[3] * t),
          ((1.0, 3.0), (0.1, 0.5), (0.1, 0.4), (0.5, 2.0)), "quadratic drag + parametric excitation"),
        T("-{c0}*sin(x) - {c1}*v + {c2}*x*exp(-{c3}*t)",
          lambda c, x, t, v: -c[0] * sin(x) - c[1] * v + c[2] * x * exp(-c[3] * t),
          ((0.5, 2.0), (0.05, 0.3), (0.2, 1.0), (0.1, 0.5)), "damped pendulum + decaying stiffness term"),
        T("{c0}*(1 - x**2)*v - {c1}*x - {c2}*v**3",
          lambda c, x, t, v: c[0] * (1 - x**2) * v - c[1] * x - c[2] * v**3,
          ((0.2, 1.0), (0.5, 2.0), (0.05, 0.3)), "van der Pol + cubic damping"),
        T("-{c0}*x*exp(-{c1}*abs(x)) - {c2}*v + {c3}*cos({c4}*t)",
          lambda c, x, t, v: -c[0] * x * exp(-c[1] * np.abs(x)) - c[2] * v + c[3] * cos(c[4] * t),
          ((1.0, 3.0), (0.1, 0.5), (0.05, 0.3), (0.2, 1.0), (0.5, 2.0)), "softening spring + forcing"),
        T("-{c0}*x - {c1}*v - {c2}*x*v**2 + {c3}*sin({c4}*t)",
          lambda c, x, t, v: -c[0] * x - c[1] * v - c[2] * x * v**2 + c[3] * sin(c[4] * t),
          ((0.5, 2.0), (0.05, 0.3), (0.1, 0.5), (0.2, 1.0), (0.5, 2.0)), "forced oscillator + x*v^2 coupling"),
    ),
)
CHEM = Domain(
    key="chem_react",
    label="chemistry",
    inputs=("t", "A"),
    descriptions=("time", "concentration at time t"),
    target="dA_dt",
    target_description="rate of change of concentration A in a reaction",
    window_id=(0.0, 5.0),
    window_ood=(5.0, 8.0),
    templates=(
        T("-{c0}*A + {c1}*A**2*exp(-{c2}*t)",
          lambda c, t, A: -c[0] * A + c[1] * A**2 * exp(-c[2] * t),
          ((0.5, 1.2), (0.05, 0.2), (0.1, 0.5)), "first order + decaying autocatalysis"),
        T("-{c0}*A**2 + {c1}*A*sin({c2}*t)",
          lambda c, t, A: -c[0] * A**2 + c[1] * A * sin(c[2] * t),
          ((0.2, 0.8), (0.1, 0.5), (0.5, 2.0)), "second order + periodic modulation"),
        T("-{c0}*A/(1 + {c1}*A) + {c2}*exp(-{c3}*t)",
          lambda c, t, A: -c[0] * A / (1 + c[1] * A) + c[2] * exp(-c[3] * t),
          ((0.5, 1.5), (0.2, 1.0), (0.1, 0.5), (0.2, 1.0)), "Michaelis-Menten + decaying feed"),
        T("-{c0}*A*sqrt(A) + {c1}*t*exp(-{c2}*t)",
          lambda c, t, A: -c[0] * A * sqrt(A) + c[1] * t * exp(-c[2] * t),
          ((0.2, 0.8), (0.2, 1.0), (0.3, 1.0)), "order 3/2 + pulse feed"),
        T("-{c0}*exp(-{c1}/(1 + {c2}*t))*A - {c3}*A**3",
          lambda c, t, A: -c[0] * exp(-c[1] / (1 + c[2] * t)) * A - c[3] * A**3,
          ((0.5, 2.0), (0.5, 2.0), (0.1, 0.5), (0.05, 0.3)), "Arrhenius rate under heating + cubic term"),
        T("{c0}*({c1} - A) - {c2}*A**2*cos({c3}*t)**2",
          lambda c, t, A: c[0] * (c[1] - A) - c[2] * A**2 * cos(c[3] * t) ** 2,
          ((0.2, 0.8), (0.5, 2.0), (0.1, 0.5), (0.3, 1.0)), "inflow relaxation + modulated second order"),
    ),
)
BIO = Domain(
    key="bio_pop_growth",
    label="biology",
    inputs=("t", "P"),
    descriptions=("time", "population at time t"),
    target="dP_dt",
    target_description="population growth rate",
    window_id=(0.0, 10.0),
    window_ood=(10.0, 15.0),
    templates=(
        T("{c0}*P*(1 - P/{c1}) + {c2}*P*sin({c3}*t)",
          lambda c, t, P: c[0] * P * (1 - P / c[1]) + c[2] * P * sin(c[3] * t),
          ((0.2, 0.8), (50.0, 150.0), (0.05, 0.2), (0.5, 2.0)), "logistic + seasonal growth"),
        T("{c0}*P*(1 - P/{c1}) - {c2}*P**2/({c3} + P**2)",
          lambda c, t, P: c[0] * P * (1 - P / c[1]) - c[2] * P**2 / (c[3] + P**2),
          ((0.2, 0.8), (50.0, 150.0), (1.0, 5.0), (50.0, 400.0)), "logistic + Holling type III predation"),
        T("{c0}*P*(P/{c1} - 1)*(1 - P/{c2}) + {c3}*exp(-{c4}*t)",
          lambda c, t, P: c[0] * P * (P / c[1] - 1) * (1 - P / c[2]) + c[3] * exp(-c[4] * t),
          ((0.005, 0.02), (2.0, 8.0), (100.0, 300.0), (0.5, 2.0), (0.1, 0.5)), "Allee effect + decaying immigration"),
        T("{c0}*P*exp(-{c1}*P) - {c2}*P*(1 + cos({c3}*t))",
          lambda c, t, P: c[0] * P * exp(-c[1] * P) - c[2] * P * (1 + cos(c[3] * t)),
          ((0.5, 1.5), (0.01, 0.05), (0.05, 0.2), (0.5, 2.0)), "Ricker growth + seasonal mortality"),
        T("{c0}*P*log({c1}/P) - {c2}*P**2*exp(-{c3}*t)",
          lambda c, t, P: c[0] * P * log(c[1] / P) - c[2] * P**2 * exp(-c[3] * t),
          ((0.1, 0.5), (50.0, 150.0), (0.001, 0.005), (0.1, 0.5)), "Gompertz + fading crowding"),
        T("{c0}*P**0.75 - {c1}*P + {c2}*P*tanh({c3}*t)",
          lambda c, t, P: c[0] * P**0.75 - c[1] * P + c[2] * P * tanh(c[3] * t),
          ((0.5, 1.5), (0.1, 0.3), (0.02, 0.08), (0.2, 1.0)), "West ontogenetic growth + maturing boost"),
    ),
)
MATSCI = Domain(
    key="matsci",
    label="materials",
    inputs=("epsilon", "T"),
    descriptions=("strain", "temperature (K)"),
    target="sigma",
    target_description="stress",
    window_id=((0.01, 0.3), (273.0, 373.0)),
    window_ood=((0.3, 0.45), (373.0, 423.0)),
    dynamic=False,
    templates=(
        T("{c0}*epsilon*(1 - {c1}*(T - {c2})) + {c3}*epsilon**2",
          lambda c, e, T: c[0] * e * (1 - c[1] * (T - c[2])) + c[3] * e**2,
          ((100.0, 300.0), (0.001, 0.003), (280.0, 300.0), (50.0, 200.0)), "thermoelastic + quadratic hardening"),
        T("{c0}*epsilon**{c1}*exp(-{c2}*(T - {c3})) + {c4}*epsilon*T",
          lambda c, e, T: c[0] * e ** c[1] * exp(-c[2] * (T - c[3])) + c[4] * e * T,
          ((100.0, 300.0), (0.2, 0.5), (0.001, 0.005), (280.0, 300.0), (0.05, 0.2)),
          "power-law hardening, thermal softening + strain-temperature coupling"),
        T("{c0}*tanh({c1}*epsilon)*(1 - {c2}*T) + {c3}*epsilon**3",
          lambda c, e, T: c[0] * tanh(c[1] * e) * (1 - c[2] * T) + c[3] * e**3,
          ((100.0, 300.0), (5.0, 15.0), (0.0005, 0.0015), (100.0, 500.0)), "saturating yield + cubic stiffening"),
        T("{c0}*epsilon - {c1}*(T - {c2})*sqrt(epsilon) + {c3}*epsilon**2*exp(-{c4}/T)",
          lambda c, e, T: c[0] * e - c[1] * (T - c[2]) * sqrt(e) + c[3] * e**2 * exp(-c[4] / T),
          ((100.0, 300.0), (0.1, 0.5), (280.0, 300.0), (200.0, 800.0), (200.0, 600.0)),
          "Hooke + thermal sqrt softening + Arrhenius hardening"),
        T("{c0}*log(1 + {c1}*epsilon)*exp(-{c2}*T) + {c3}*epsilon*cos({c4}*T)",
          lambda c, e, T: c[0] * log(1 + c[1] * e) * exp(-c[2] * T) + c[3] * e * cos(c[4] * T),
          ((100.0, 300.0), (10.0, 50.0), (0.001, 0.003), (10.0, 50.0), (0.01, 0.03)),
          "logarithmic hardening + oscillating temperature term"),
        T("({c0} - {c1}*T)*epsilon/(1 + {c2}*epsilon) + {c3}*epsilon**2*T",
          lambda c, e, T: (c[0] - c[1] * T) * e / (1 + c[2] * e) + c[3] * e**2 * T,
          ((200.0, 400.0), (0.1, 0.4), (2.0, 8.0), (0.5, 2.0)), "temperature-dependent saturating modulus"),
    ),
)
del T
DOMAINS: dict[str, Domain] = {d.key: d for d in (PHYS, CHEM, BIO, MATSCI)}
ALIASES = {d.label: d.key for d in DOMAINS.values()} | {"phys": "phys_osc", "chem": "chem_react", "bio": "bio_pop_growth"}
SPLITS = ("all", "train", "test")


def get_domain(name: str) -> Domain:
    key = ALIASES.get(name, name)
    if key not in DOMAINS:
        raise TaskError(f"unknown synthetic domain {name!r}; choose from {sorted(DOMAINS) + sorted(ALIASES)}")
    return DOMAINS[key]


def _round_sig(x: float, digits: int = 3) -> float:
    return float(f"{x:.{digits}g}")


def _num(x: float) -> str:
    return repr(float(x))


def ground_truth(domain: str, template: int, constants: Sequence[float]) -> str:
    """The template with its constants written in, in the engine grammar over the domain's inputs."""
    tpl = get_domain(domain).templates[template]
    return tpl.formula.format(**{f"c{i}": _num(v) for i, v in enumerate(constants)})


def _split_sizes(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _simulate(dom: Domain, tpl: Template, c: np.ndarray, rng: np.random.Generator, n_in: int, n_ood: int,
              n_trajectories: int) -> tuple[np.ndarray, np.ndarray, list[list[float]]] | None:
    """Integrate seeded trajectories; returns (X in the early window, X in the OOD window, initial states),
    or None when a trajectory fails or leaves the ``MAX_STATE`` box."""
    phys = dom.key == "phys_osc"

    def columns(t: np.ndarray | float, s: np.ndarray) -> tuple:
        return (s[0], t, s[1]) if phys else (t, s[0])

    def rhs(t: float, s: np.ndarray) -> list[float]:
        f = float(tpl.fn(c, *columns(t, s)))
        return [s[1], f] if phys else [f]

    def escape(t: float, s: np.ndarray) -> float:
        return MAX_STATE - float(np.max(np.abs(s)))

    escape.terminal = True  # type: ignore[attr-defined]
    (lo_id, hi_id), (lo_ood, hi_ood) = dom.window_id, dom.window_ood
    blocks_in, blocks_ood, inits = [], [], []
    for n_i, n_o in zip(_split_sizes(n_in, n_trajectories), _split_sizes(n_ood, n_trajectories)):
        if phys:
            y0 = [float(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.5)), float(rng.uniform(-1.0, 1.0))]
        elif dom.key == "chem_react":
            y0 = [float(rng.uniform(0.5, 2.0))]
        else:
            y0 = [float(rng.uniform(5.0, 20.0))]
        t_in = np.sort(rng.uniform(lo_id, hi_id, n_i))
        t_ood = np.sort(rng.uniform(lo_ood, hi_ood, n_o))
        t_eval = np.concatenate([t_in, t_ood])
        with np.errstate(all="ignore"):
            sol = solve_ivp(rhs, (0.0, hi_ood), y0, method="DOP853", t_eval=t_eval, rtol=RTOL, atol=ATOL,
                            events=escape)
        if sol.status != 0 or sol.y.shape[1] != t_eval.size or not np.all(np.isfinite(sol.y)):
            return None
        X = np.column_stack(columns(sol.t, sol.y))
        blocks_in.append(X[:n_i])
        blocks_ood.append(X[n_i:])
        inits.append(y0)
    return np.concatenate(blocks_in), np.concatenate(blocks_ood), inits


def _target(tpl: Template, c: np.ndarray, X: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(tpl.fn(c, *X.T), dtype=np.float64)


def _usable(y: np.ndarray) -> bool:
    if y.size == 0 or not np.all(np.isfinite(y)) or np.max(np.abs(y)) > 1e8:
        return False
    return bool(np.ptp(y) > 1e-6 * max(1.0, float(np.max(np.abs(y)))))


def generate_task(
    domain: str,
    index: int,
    seed: int = 0,
    *,
    n_train: int = 500,
    n_test: int = 200,
    n_ood: int = 200,
    n_trajectories: int = 1,
) -> Task:
    """Task ``index`` of a domain: template ``index % n_templates`` with constants and initial conditions drawn
    from ``(seed, domain, index)``. Same arguments -> identical arrays."""
    dom = get_domain(domain)
    if index < 0:
        raise TaskError(f"index must be >= 0, got {index}")
    if n_train < 10 or n_test < 0 or n_ood < 0 or n_trajectories < 1:
        raise TaskError("need n_train >= 10, n_test >= 0, n_ood >= 0, n_trajectories >= 1")
    k = len(dom.templates)
    t_idx, variant = index % k, index // k
    tpl = dom.templates[t_idx]
    domain_id = list(DOMAINS).index(dom.key)
    n_in = n_train + n_test
    for attempt in range(MAX_ATTEMPTS):
        rng = np.random.default_rng([seed, domain_id, index, attempt])
        c = np.array([_round_sig(rng.uniform(lo, hi)) for lo, hi in tpl.ranges])
        if dom.dynamic:
            sim = _simulate(dom, tpl, c, rng, n_in, n_ood, n_trajectories)
            if sim is None:
                continue
            X_in, X_ood, inits = sim
        else:
            (e0, e1), (T0, T1) = dom.window_id
            (f0, f1), (U0, U1) = dom.window_ood
            X_in = np.column_stack([rng.uniform(e0, e1, n_in), rng.uniform(T0, T1, n_in)])
            X_ood = np.column_stack([rng.uniform(f0, f1, n_ood), rng.uniform(U0, U1, n_ood)])
            inits = []
        y_in, y_ood = _target(tpl, c, X_in), _target(tpl, c, X_ood)
        held = np.zeros(n_in, dtype=bool)
        held[rng.permutation(n_in)[:n_test]] = True
        if not (_usable(y_in[~held]) and (n_test == 0 or _usable(y_in[held])) and (n_ood == 0 or _usable(y_ood))):
            continue
        if n_ood and np.std(y_ood) < MIN_OOD_SPREAD * np.std(y_in[~held]):
            continue  # the system has settled: an OOD test on a near-constant target measures nothing
        break
    else:
        raise TaskError(f"{dom.key} template {t_idx}: no usable draw in {MAX_ATTEMPTS} attempts (seed {seed})")
    return Task(
        name=f"{dom.key}_synth_{index:02d}",
        domain=dom.label,
        input_names=list(dom.inputs),
        input_descriptions=list(dom.descriptions),
        target_name=dom.target,
        target_description=dom.target_description,
        train=Split(X_in[~held], y_in[~held]),
        test_id=Split(X_in[held], y_in[held]) if n_test else None,
        test_ood=Split(X_ood, y_ood) if n_ood else None,
        ground_truth=ground_truth(dom.key, t_idx, c),
        metadata={
            "source": "synthetic",
            "lsr_domain": dom.key,
            "template": t_idx,
            "variant": variant,
            "template_formula": tpl.formula.replace("{", "").replace("}", ""),
            "constants": [float(v) for v in c],
            "note": tpl.note,
            "seed": seed,
            "attempt": attempt,
            "window_id": np.asarray(dom.window_id).tolist(),
            "window_ood": np.asarray(dom.window_ood).tolist(),
            **({"initial_conditions": inits} if inits else {}),
        },
    )


def task_indices(domain: str, n: int, split: str = "all") -> list[int]:
    """The first ``n`` task indices of ``split``: "train" = even template positions, "test" = odd, "all" = every."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, got {split!r}")
    k = len(get_domain(domain).templates)
    out, i = [], 0
    while len(out) < n:
        if split == "all" or (i % k) % 2 == (0 if split == "train" else 1):
            out.append(i)
        i += 1
    return out


def synthetic_suite(
    n_per_domain: int = 3,
    domains: Iterable[str] | None = None,
    seed: int = 0,
    split: str = "all",
    names: Iterable[str] | None = None,
    **options: int,
) -> list[Task]:
    """``n_per_domain`` tasks for each domain (all four by default); ``names`` (``phys_osc_synth_03``) pick exact
    tasks instead. ``options`` go to :func:`generate_task` (n_train, n_test, n_ood, n_trajectories)."""
    if names is not None:
        tasks = []
        for name in names:
            key, sep, idx = str(name).rpartition("_synth_")
            if not sep or not idx.isdigit():
                raise TaskError(f"synthetic task names look like 'phys_osc_synth_03', got {name!r}")
            tasks.append(generate_task(key, int(idx), seed, **options))
        return tasks
    keys = [get_domain(d).key for d in (domains if domains is not None else DOMAINS)]
    return [generate_task(key, i, seed, **options) for key in keys for i in task_indices(key, n_per_domain, split)]
