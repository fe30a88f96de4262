"""LSR-Synth-grade tasks (suite ``lsr_like``): LLM-SRBench's recipe for LSR-Synth, our own instances.

The recipe (Shojaee et al. 2025, arXiv 2504.10415, section 2.2), step by step, and what stands for each step here:

1. **Known terms** of a domain (an LLM lists the textbook terms; here :data:`TERMS` ``kind="known"``: first- and
   second-order kinetics, logistic growth, Hooke's law, harmonic restoring force ...).
2. **Synthetic terms** a model cannot recall (fractional powers, saturations, exponential decays with small rates,
   products with time-dependent factors, nested forms: ``kind="synthetic"``). The synthetic terms of a domain are
   split in two disjoint halves: training laws use one, held-out laws the other, so a harness tuned on
   ``split="train"`` has never seen a held-out law's unusual term.
3. **Laws** = known terms + synthetic terms (:data:`LAWS`, chosen by ``scripts/curate_lsr_like.py`` from seeded
   compositions, see below).
4. **Solvability**: the dynamics integrate over the whole horizon (DOP853, rtol 1e-10; Radau when that fails),
   the state stays physical (concentrations and populations positive, no blow-up), and the law is *recoverable*:
   its own form with constants refitted in float64 on the training rows (from the true values) reaches acc_0.001
   on both test splits. This rejects draws whose targets are float round-off near an equilibrium, where no method
   could be judged.
5. **Non-trivial**: the system has not settled before the OOD window (median |target| there at least 1e-4 of
   the largest in-domain one), every term carries weight (RMS at least 1% of the largest term's), a cubic polynomial in the
   inputs does not reach acc_0.01 in domain, and - decided once, by the curation script, not at load time - the
   engine alone does not solve the law (acc_0.01 in domain) in a 10, 60 or 120 s run on an instance of its own.
6. **Data as the benchmark lays it out**: one trajectory from a random initial state integrated over a long
   horizon (60 time units; the oscillator 30), 5,000 evenly spaced time points, the target the law's right-hand
   side at each state (exact: the ground truth reproduces every row). Trajectories approach their equilibrium or
   limit cycle, so targets pass near zero and relative accuracy is hard, as in LSR-Synth. OOD = the last 10% of
   the time axis; train and the in-domain test are a random 80/20 split of the rest. Materials (a static law):
   5,000 random (strain, temperature) points; OOD = an unseen, higher temperature range.
7. **Constants** drawn uniformly per task in physical ranges, at full double precision (as LLM-SRBench writes
   them: ``0.9539969835279999``), written into the ground truth as numbers.

Variable names and descriptions per domain are LLM-SRBench's (:data:`benchmarks.sources.lsr_synth.DOMAINS`).
Seeded and deterministic: the same (seed, domain, index) gives identical arrays. A draw that fails a check is
redrawn (next attempt seed); the attempt is recorded in the task's metadata.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy.integrate import solve_ivp

from benchmarks.sources.lsr_synth import DOMAIN_LABELS, DOMAINS as LSR_DOMAINS
from harness.engine.evaluator import compute_metrics, fit
from harness.engine.expression import Expression, parse_expression
from harness.engine.task import Split, Task, TaskError

RTOL, ATOL = 1e-10, 1e-12
MAX_STATE = 1e4
MAX_ATTEMPTS = 64  # a draw is cheap (~0.05 s); the fussiest curated law needed 34 at one of six seeds
N_POINTS = 5000
OOD_FRACTION = 0.1
TEST_FRACTION = 0.2
MIN_TERM_SHARE = 0.01  # every term's RMS over the in-domain rows, relative to the largest term's
MIN_OOD_LEVEL = 1e-4  # median |target| in the OOD window, relative to the largest in-domain |target|
SPLITS = ("all", "train", "test")


@dataclass(frozen=True)
class Term:
    """One additive term: ``formula`` in the engine grammar with ``{name}`` placeholders for its constants."""

    key: str
    formula: str
    ranges: tuple[tuple[str, float, float], ...]
    kind: str  # "known" | "synthetic"
    half: str = ""  # synthetic terms: "train" or "test" (which laws may use them)
    note: str = ""


@dataclass(frozen=True)
class Law:
    """Known + synthetic terms of one domain; ``split`` follows the synthetic terms' half."""

    terms: tuple[str, ...]
    split: str


@dataclass(frozen=True)
class Domain:
    key: str
    dynamic: bool
    horizon: float = 60.0  # dynamics: t in [0, horizon]
    initial: tuple[tuple[float, float], ...] = ()  # dynamics: initial state ranges (phys: x0 magnitude, v0)
    strain: tuple[float, float] = (0.0, 0.0)  # materials
    temperature_id: tuple[float, float] = (0.0, 0.0)
    temperature_ood: tuple[float, float] = (0.0, 0.0)

    @property
    def target(self) -> str:
        return LSR_DOMAINS[self.key][0]

    @property
    def target_description(self) -> str:
        return LSR_DOMAINS[self.key][1]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(n for n, _ in LSR_DOMAINS[self.key][2])

    @property
    def descriptions(self) -> tuple[str, ...]:
        return tuple(d for _, d in LSR_DOMAINS[self.key][2])


DOMAIN_SPECS: dict[str, Domain] = {
    "chem_react": Domain("chem_react", True, 60.0, ((0.5, 2.0),)),
    "bio_pop_growth": Domain("bio_pop_growth", True, 60.0, ((5.0, 50.0),)),
    "phys_osc": Domain("phys_osc", True, 30.0, ((0.5, 2.0), (-1.0, 1.0))),
    "matsci": Domain("matsci", False, strain=(0.0, 0.5), temperature_id=(273.0, 473.0),
                     temperature_ood=(473.0, 573.0)),
}


def _t(key: str, formula: str, kind: str, half: str = "", note: str = "", **ranges: tuple[float, float]) -> Term:
    return Term(key, formula, tuple((n, lo, hi) for n, (lo, hi) in ranges.items()), kind, half, note)


# Term libraries. Signs are part of a term; constants are positive. Known terms are shared by both halves.
TERMS: dict[str, dict[str, Term]] = {
    "chem_react": {t.key: t for t in (
        _t("first_order", "-{k}*A", "known", note="first-order decay", k=(0.02, 0.2)),
        _t("second_order", "-{k}*A**2", "known", note="second-order reaction", k=(0.02, 0.2)),
        _t("saturating", "-{k}*A/(1 + {b}*A)", "known", note="Michaelis-Menten saturation", k=(0.05, 0.3),
           b=(0.5, 3.0)),
        _t("relaxation", "{k}*({a} - A)", "known", note="reversible relaxation to equilibrium", k=(0.02, 0.15),
           a=(0.2, 1.0)),
        _t("feed", "{f}", "known", note="zero-order production", f=(0.005, 0.05)),
        # synthetic, training half
        _t("sqrt_decay", "-{c}*sqrt(A)*exp(-{s}*t)", "synthetic", "train", "square-root sink fading in time",
           c=(0.05, 0.3), s=(0.02, 0.2)),
        _t("pulse_feed", "{c}*t*exp(-{s}*t)", "synthetic", "train", "pulse feed", c=(0.05, 0.3), s=(0.1, 0.5)),
        _t("periodic_rate", "{c}*A*sin({w}*t)", "synthetic", "train", "periodically modulated rate",
           c=(0.05, 0.3), w=(0.2, 1.0)),
        _t("log_sink", "-{c}*A*log(1 + A)", "synthetic", "train", "logarithmic sink", c=(0.1, 0.5)),
        _t("inhibited", "-{c}*A/({b} + A**2)", "synthetic", "train", "substrate inhibition", c=(0.05, 0.3),
           b=(0.2, 1.0)),
        _t("fractional_sink", "-{c}*A**{p}", "synthetic", "train", "fractional-order sink", c=(0.02, 0.2),
           p=(1.2, 1.8)),
        # synthetic, held-out half
        _t("cbrt_source", "{c}*A**{p}*exp(-{s}*t)", "synthetic", "test", "fractional-power source fading in time",
           c=(0.05, 0.3), p=(0.25, 0.45), s=(0.05, 0.3)),
        _t("slowing_rate", "-{c}*A/(1 + {s}*t)", "synthetic", "test", "rate slowing with time", c=(0.05, 0.5),
           s=(0.05, 0.5)),
        _t("decaying_autocatalysis", "{c}*A**2*exp(-{s}*t)", "synthetic", "test", "decaying autocatalysis",
           c=(0.05, 0.3), s=(0.1, 0.5)),
        _t("periodic_feed", "{c}*cos({w}*t)**2", "synthetic", "test", "periodic feed", c=(0.01, 0.1),
           w=(0.2, 1.0)),
        _t("damped_second_order", "-{c}*A**2*exp(-{s}*A)", "synthetic", "test", "self-limiting second order",
           c=(0.1, 0.5), s=(0.5, 2.0)),
        _t("tanh_onset", "-{c}*A*tanh({s}*t)", "synthetic", "test", "sink switching on", c=(0.05, 0.3),
           s=(0.05, 0.5)),
    )},
    "bio_pop_growth": {t.key: t for t in (
        _t("exponential", "{r}*P", "known", note="exponential growth", r=(0.02, 0.2)),
        _t("logistic", "{r}*P*(1 - P/{K})", "known", note="logistic growth", r=(0.05, 0.3), K=(50.0, 500.0)),
        _t("mortality", "-{d}*P", "known", note="constant mortality", d=(0.01, 0.2)),
        _t("predation", "-{a}*P**2/({b} + P**2)", "known", note="Holling type III predation", a=(1.0, 10.0),
           b=(100.0, 1000.0)),
        _t("gompertz", "{r}*P*log({K}/P)", "known", note="Gompertz growth", r=(0.05, 0.3), K=(50.0, 500.0)),
        # synthetic, training half
        _t("cbrt_growth", "{c}*P**{p}", "synthetic", "train", "fractional-power growth", c=(0.2, 1.0),
           p=(0.25, 0.45)),
        _t("fading_growth", "{c}*P*exp(-{s}*t)", "synthetic", "train", "growth fading in time", c=(0.05, 0.5),
           s=(0.02, 0.2)),
        _t("seasonal", "{c}*P*sin({w}*t)", "synthetic", "train", "seasonal growth", c=(0.02, 0.2),
           w=(0.2, 1.0)),
        _t("saturating_crowding", "-{c}*P**2/(1 + {s}*P)", "synthetic", "train", "saturating crowding",
           c=(0.001, 0.01), s=(0.005, 0.05)),
        _t("maturing_loss", "-{c}*P*tanh({s}*t)", "synthetic", "train", "loss that matures in time",
           c=(0.02, 0.2), s=(0.05, 0.5)),
        _t("log_immigration", "{c}*log(1 + P)", "synthetic", "train", "logarithmic immigration", c=(0.1, 1.0)),
        # synthetic, held-out half
        _t("sqrt_fading", "{c}*sqrt(P)*exp(-{s}*t)", "synthetic", "test", "square-root growth fading in time",
           c=(0.2, 1.0), s=(0.02, 0.2)),
        _t("slowing_growth", "{c}*P/(1 + {s}*t)", "synthetic", "test", "growth slowing with time",
           c=(0.05, 0.5), s=(0.05, 0.5)),
        _t("superlinear_loss", "-{c}*P**{p}", "synthetic", "test", "super-linear loss", c=(0.001, 0.01),
           p=(1.3, 1.7)),
        _t("seasonal_mortality", "-{c}*P*cos({w}*t)**2", "synthetic", "test", "seasonal mortality",
           c=(0.02, 0.2), w=(0.2, 1.0)),
        _t("scarcity_loss", "-{c}*P*exp(-{s}/P)", "synthetic", "test", "loss growing with abundance",
           c=(0.02, 0.2), s=(5.0, 50.0)),
        _t("pulse_growth", "{c}*t*P*exp(-{s}*t)", "synthetic", "test", "pulse of growth", c=(0.01, 0.1),
           s=(0.1, 0.5)),
    )},
    "phys_osc": {t.key: t for t in (
        _t("harmonic", "-{w}*x", "known", note="harmonic restoring force", w=(0.5, 3.0)),
        _t("damping", "-{b}*v", "known", note="linear damping", b=(0.05, 0.5)),
        _t("duffing", "-{a}*x**3", "known", note="Duffing stiffening", a=(0.1, 1.0)),
        _t("driving", "{f}*sin({w}*t)", "known", note="periodic driving", f=(0.1, 1.0), w=(0.5, 2.0)),
        _t("pendulum", "-{g}*sin(x)", "known", note="pendulum restoring force", g=(0.5, 3.0)),
        # synthetic, training half
        _t("cubic_damping", "-{c}*v**3", "synthetic", "train", "cubic damping", c=(0.05, 0.5)),
        _t("parametric", "{c}*x*cos({w}*t)", "synthetic", "train", "parametric excitation", c=(0.1, 0.5),
           w=(0.5, 2.0)),
        _t("soft_spring", "-{c}*x/(1 + {k}*x**2)", "synthetic", "train", "saturating spring", c=(0.5, 2.0),
           k=(0.5, 2.0)),
        _t("friction", "-{c}*tanh({k}*v)", "synthetic", "train", "smoothed dry friction", c=(0.05, 0.3),
           k=(1.0, 5.0)),
        _t("fading_stiffness", "{c}*x*exp(-{s}*t)", "synthetic", "train", "stiffness fading in time",
           c=(0.2, 1.0), s=(0.05, 0.3)),
        _t("position_damping", "-{c}*v*exp(-{s}*x**2)", "synthetic", "train", "damping confined near rest",
           c=(0.1, 0.5), s=(0.5, 2.0)),
        # synthetic, held-out half
        _t("sqrt_spring", "-{c}*x*sqrt(abs(x))", "synthetic", "test", "spring of order 3/2", c=(0.2, 1.0)),
        _t("quadratic_drag", "-{c}*v*abs(v)", "synthetic", "test", "quadratic drag", c=(0.05, 0.5)),
        _t("coupled_damping", "-{c}*x**2*v", "synthetic", "test", "amplitude-dependent damping", c=(0.05, 0.5)),
        _t("decaying_drive", "{c}*exp(-{s}*t)*cos({w}*t)", "synthetic", "test", "decaying drive",
           c=(0.2, 1.0), s=(0.02, 0.2), w=(0.5, 2.0)),
        _t("soft_exp_spring", "-{c}*x*exp(-{s}*abs(x))", "synthetic", "test", "softening spring",
           c=(0.5, 2.0), s=(0.1, 0.5)),
        _t("sine_drag", "-{c}*sin(v)", "synthetic", "test", "sinusoidal drag", c=(0.05, 0.5)),
    )},
    "matsci": {t.key: t for t in (
        _t("hooke", "{E}*epsilon", "known", note="Hooke's law", E=(50.0, 300.0)),
        _t("thermal_softening", "{E}*epsilon*(1 - {a}*(T - {T0}))", "known", note="thermal softening",
           E=(50.0, 300.0), a=(0.001, 0.003), T0=(273.0, 300.0)),
        _t("hollomon", "{K}*epsilon**{n}", "known", note="power-law hardening", K=(100.0, 500.0), n=(0.1, 0.5)),
        _t("thermal_stress", "-{b}*(T - {T0})", "known", note="thermal stress", b=(0.05, 0.5), T0=(273.0, 300.0)),
        # synthetic, training half
        _t("cubic_stiffening", "{c}*epsilon**3", "synthetic", "train", "cubic stiffening", c=(50.0, 500.0)),
        _t("sqrt_thermal", "{c}*sqrt(epsilon)*exp(-{s}*T)", "synthetic", "train",
           "square-root hardening, thermally activated", c=(100.0, 500.0), s=(0.001, 0.005)),
        _t("log_temperature", "{c}*epsilon*log(T)", "synthetic", "train", "logarithmic temperature coupling",
           c=(5.0, 30.0)),
        _t("saturating_yield", "{c}*tanh({k}*epsilon)*(1 - {a}*T)", "synthetic", "train",
           "saturating yield, temperature-weakened", c=(20.0, 100.0), k=(5.0, 15.0), a=(0.0005, 0.0015)),
        _t("oscillating_temperature", "{c}*epsilon*cos({w}*T)", "synthetic", "train",
           "oscillating temperature term", c=(10.0, 50.0), w=(0.01, 0.03)),
        # synthetic, held-out half
        _t("arrhenius_quadratic", "{c}*epsilon**2*exp(-{s}/T)", "synthetic", "test",
           "Arrhenius-activated quadratic hardening", c=(200.0, 800.0), s=(200.0, 600.0)),
        _t("thermal_sqrt", "-{c}*(T - {T0})*sqrt(epsilon)", "synthetic", "test", "thermal square-root softening",
           c=(0.1, 0.5), T0=(273.0, 300.0)),
        _t("quadratic_thermal", "-{c}*epsilon**2*T", "synthetic", "test", "strain-temperature softening",
           c=(0.5, 2.0)),
        _t("sine_strain", "{c}*sin({w}*epsilon)*sqrt(T)", "synthetic", "test", "sinusoidal strain term",
           c=(0.5, 3.0), w=(2.0, 6.0)),
        _t("power_temperature", "{c}*epsilon*T**{p}", "synthetic", "test", "power-law temperature coupling",
           c=(0.5, 5.0), p=(0.3, 0.7)),
    )},
}
ALIASES = {label: key for key, label in DOMAIN_LABELS.items()} | {"phys": "phys_osc", "chem": "chem_react",
                                                                   "bio": "bio_pop_growth"}

# The curated laws: `python scripts/curate_lsr_like.py --candidates 24 --keep 8 --seconds 10 60 120` (24 seeded
# compositions per domain and half; kept = solvable at six seeds, non-trivial, and not solved by Operon alone in
# 10, 60 or 120 s on an instance of its own; the held-out materials law survived 60 s, none survived 120 s; the
# figures are in docs/benchmarks.md). Train and test laws alternate while both last; position i of a domain's list
# is task index i (an index past the end cycles through the laws again with new constants).
LAWS: dict[str, tuple[Law, ...]] = {
    "chem_react": (
        Law(('first_order', 'relaxation', 'pulse_feed', 'log_sink'), 'train'),
        Law(('first_order', 'feed', 'slowing_rate', 'tanh_onset'), 'test'),
        Law(('saturating', 'feed', 'sqrt_decay', 'periodic_rate'), 'train'),
        Law(('first_order', 'feed', 'slowing_rate'), 'test'),
        Law(('feed', 'pulse_feed', 'periodic_rate'), 'train'),
        Law(('saturating', 'cbrt_source', 'damped_second_order'), 'test'),
        Law(('saturating', 'fractional_sink'), 'train'),
        Law(('relaxation', 'feed', 'inhibited'), 'train'),
    ),
    "bio_pop_growth": (
        Law(('mortality', 'predation', 'cbrt_growth', 'saturating_crowding'), 'train'),
        Law(('mortality', 'gompertz', 'superlinear_loss', 'scarcity_loss'), 'test'),
        Law(('gompertz', 'cbrt_growth', 'maturing_loss'), 'train'),
        Law(('predation', 'sqrt_fading', 'seasonal_mortality'), 'test'),
    ),
    "phys_osc": (
        Law(('harmonic', 'parametric', 'friction'), 'train'),
        Law(('damping', 'sqrt_spring', 'soft_exp_spring'), 'test'),
        Law(('pendulum', 'cubic_damping', 'parametric'), 'train'),
        Law(('harmonic', 'duffing', 'soft_exp_spring', 'sine_drag'), 'test'),
        Law(('duffing', 'pendulum', 'friction'), 'train'),
        Law(('damping', 'decaying_drive', 'soft_exp_spring'), 'test'),
        Law(('driving', 'cubic_damping', 'fading_stiffness'), 'train'),
        Law(('driving', 'pendulum', 'decaying_drive', 'sine_drag'), 'test'),
        Law(('duffing', 'quadratic_drag', 'decaying_drive'), 'test'),
        Law(('driving', 'pendulum', 'sqrt_spring', 'quadratic_drag'), 'test'),
        Law(('harmonic', 'damping', 'quadratic_drag', 'soft_exp_spring'), 'test'),
        Law(('duffing', 'sqrt_spring'), 'test'),
    ),
    "matsci": (
        Law(('thermal_stress', 'cubic_stiffening', 'sqrt_thermal'), 'train'),
        Law(('hooke', 'thermal_softening', 'arrhenius_quadratic', 'thermal_sqrt'), 'test'),
    ),
}


def get_domain(name: str) -> Domain:
    key = ALIASES.get(name, name)
    if key not in DOMAIN_SPECS:
        raise TaskError(f"unknown lsr_like domain {name!r}; choose from {sorted(DOMAIN_SPECS) + sorted(ALIASES)}")
    return DOMAIN_SPECS[key]


def law_split(domain: str, terms: Sequence[str]) -> str:
    """'train' or 'test': the half of the law's synthetic terms (all from one half, else a TaskError)."""
    lib = TERMS[domain]
    halves = {lib[k].half for k in terms if lib[k].kind == "synthetic"}
    if len(halves) != 1:
        raise TaskError(f"{domain} law {tuple(terms)}: its synthetic terms must all come from one half, got {halves}")
    return halves.pop()


def candidate_laws(domain: str, half: str, n: int, seed: int = 0) -> list[Law]:
    """``n`` distinct seeded compositions: one or two known terms + one or two synthetic terms of ``half``
    (the curation script's raw material)."""
    key = get_domain(domain).key
    lib = TERMS[key]
    known = [k for k, t in lib.items() if t.kind == "known"]
    synthetic = [k for k, t in lib.items() if t.kind == "synthetic" and t.half == half]
    pool = [tuple(a) + tuple(b) for nk in (1, 2) for ns in (1, 2)
            for a in itertools.combinations(known, nk) for b in itertools.combinations(synthetic, ns)]
    order = np.random.default_rng([seed, list(DOMAIN_SPECS).index(key), SPLITS.index(half)]).permutation(len(pool))
    return [Law(pool[i], half) for i in order[:n]]


def _number(x: float) -> str:
    return repr(float(x))


def _draw_constants(term: Term, rng: np.random.Generator) -> dict[str, float]:
    return {name: float(rng.uniform(lo, hi)) for name, lo, hi in term.ranges}


def law_formula(domain: str, terms: Sequence[str], constants: Sequence[dict[str, float]]) -> list[str]:
    """Each term with its constants written in (engine grammar over the domain's inputs)."""
    lib = TERMS[domain]
    return [lib[k].formula.format(**{n: _number(v) for n, v in c.items()}) for k, c in zip(terms, constants)]


def _sum(parts: Sequence[str]) -> str:
    text = " + ".join(parts)
    return text.replace("+ -", "- ")


@dataclass
class _Draw:
    X_id: np.ndarray
    X_ood: np.ndarray
    initial: list[float]


def _integrate(dom: Domain, law: Expression, y0: list[float], t_eval: np.ndarray) -> np.ndarray | None:
    """States at ``t_eval`` (rows: t, then state), or None when the integration fails or leaves the physical box."""
    phys = dom.key == "phys_osc"

    def inputs(t: float, s: np.ndarray) -> list[np.ndarray]:
        cols = (s[0], t, s[1]) if phys else (t, s[0])
        return [np.array([float(c)]) for c in cols]

    def rhs(t: float, s: np.ndarray) -> list[float]:
        f = float(law.evaluate(inputs(t, s), n=1)[0])
        return [s[1], f] if phys else [f]

    def escape(t: float, s: np.ndarray) -> float:
        return MAX_STATE - float(np.max(np.abs(s)))

    def extinct(t: float, s: np.ndarray) -> float:  # concentrations and populations stay positive
        return float(s[0]) - 1e-9

    events = [escape] + ([] if phys else [extinct])
    for ev in events:
        ev.terminal = True  # type: ignore[attr-defined]
    for method in ("DOP853", "Radau"):
        with np.errstate(all="ignore"):
            try:
                sol = solve_ivp(rhs, (0.0, float(t_eval[-1])), y0, method=method, t_eval=t_eval, rtol=RTOL,
                                atol=ATOL, events=events)
            except (ValueError, ArithmeticError):
                continue
        if sol.status == 0 and sol.y.shape[1] == t_eval.size and np.all(np.isfinite(sol.y)):
            return sol.y
        if sol.status == 1:  # an event: the trajectory left the physical box, another method will not help
            return None
    return None


def _columns(dom: Domain, t: np.ndarray, states: np.ndarray) -> np.ndarray:
    if dom.key == "phys_osc":
        return np.column_stack([states[0], t, states[1]])
    return np.column_stack([t, states[0]])


def _simulate(dom: Domain, law: Expression, rng: np.random.Generator, n_points: int, ood_fraction: float
              ) -> _Draw | None:
    if not dom.dynamic:
        n_ood = int(round(n_points * ood_fraction))
        n_id = n_points - n_ood
        e0, e1 = dom.strain
        X_id = np.column_stack([rng.uniform(e0, e1, n_id), rng.uniform(*dom.temperature_id, n_id)])
        X_ood = np.column_stack([rng.uniform(e0, e1, n_ood), rng.uniform(*dom.temperature_ood, n_ood)])
        return _Draw(X_id, X_ood, [])
    if dom.key == "phys_osc":
        (m0, m1), (v0, v1) = dom.initial
        y0 = [float(rng.choice([-1.0, 1.0]) * rng.uniform(m0, m1)), float(rng.uniform(v0, v1))]
    else:
        y0 = [float(rng.uniform(*dom.initial[0]))]
    t = np.linspace(0.0, dom.horizon, n_points)
    states = _integrate(dom, law, y0, t)
    if states is None:
        return None
    X = _columns(dom, t, states)
    cut = int(round(n_points * (1.0 - ood_fraction)))
    return _Draw(X[:cut], X[cut:], y0)


def _rms(v: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(v))))


def _polynomial_features(X: np.ndarray, degree: int = 3) -> np.ndarray:
    cols = [np.ones(len(X))]
    for d in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(X.shape[1]), d):
            cols.append(np.prod(X[:, combo], axis=1))
    return np.column_stack(cols)


def polynomial_accuracy(train: Split, test: Split, degree: int = 3) -> float:
    """acc_0.01 on ``test`` of a least-squares polynomial of ``degree`` in the inputs fitted on ``train``
    (scaled columns): the cheap check that a law is not within reach of a plain polynomial."""
    lo, hi = train.X.min(axis=0), train.X.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)

    def feats(X: np.ndarray) -> np.ndarray:
        return _polynomial_features((X - lo) / span, degree)

    coef, *_ = np.linalg.lstsq(feats(train.X), train.y, rcond=None)
    return float(compute_metrics(test.y, feats(test.X) @ coef)["acc_0.01"])


def recoverable(truth: str, inputs: Sequence[str], train: Split, tests: Iterable[Split]) -> bool:
    """The law's own form, constants refitted in float64 on ``train`` from their true values, reaches acc_0.001
    on every test split: the accuracy figures can be earned by finding the law."""
    from harness.engine.symbolic import truth_skeleton

    skeleton, constants = truth_skeleton(truth, list(inputs))
    skeleton = Expression(skeleton.sympy, skeleton.variables, dict(zip(skeleton.parameters, constants)))
    result = fit(skeleton, train.X, train.y, n_starts=1, max_seconds=10.0)
    if result.status not in ("ok", "no_params"):
        return False
    for split in tests:
        pred = skeleton(split.X, result.params)
        if compute_metrics(split.y, pred)["acc_0.001"] < 1.0:
            return False
    return True


def _checks(dom: Domain, terms: Sequence[str], parts: Sequence[str], truth: str, train: Split, test_id: Split,
            test_ood: Split) -> str:
    """'' when the draw passes every load-time check, else the reason (recorded for the redraw)."""
    for split in (train, test_id, test_ood):
        y = split.y
        if not np.all(np.isfinite(y)) or np.max(np.abs(y)) > 1e8 or np.ptp(y) <= 1e-9 * max(1.0, np.max(np.abs(y))):
            return "degenerate target"
    if np.median(np.abs(test_ood.y)) < MIN_OOD_LEVEL * np.max(np.abs(train.y)):
        return "settled before the OOD window"
    X = np.vstack([train.X, test_id.X])
    rms = [_rms(parse_expression(p, dom.inputs)(X)) for p in parts]
    if not all(np.isfinite(rms)) or min(rms) < MIN_TERM_SHARE * max(rms):
        return "a term carries no weight"
    if polynomial_accuracy(train, test_id) >= 1.0:
        return "a cubic polynomial fits it"
    if not recoverable(truth, dom.inputs, train, (test_id, test_ood)):
        return "not recoverable by refitting the law itself"
    return ""


def make_task(domain: str, terms: Sequence[str], name: str, seed: int = 0, *, salt: Sequence[int] = (),
              n_points: int = N_POINTS, ood_fraction: float = OOD_FRACTION, test_fraction: float = TEST_FRACTION,
              max_attempts: int = MAX_ATTEMPTS, metadata: dict | None = None) -> Task:
    """A task of ``domain`` from a law (term keys): constants, initial state and the train/test split drawn from
    ``(seed, *salt, attempt)``, redrawn until every check passes."""
    dom = get_domain(domain)
    lib = TERMS[dom.key]
    missing = [k for k in terms if k not in lib]
    if missing:
        raise TaskError(f"{dom.key}: unknown term(s) {missing}; terms: {sorted(lib)}")
    if n_points < 100 or not 0.0 < ood_fraction < 0.5 or not 0.0 < test_fraction < 0.9:
        raise TaskError("need n_points >= 100, 0 < ood_fraction < 0.5, 0 < test_fraction < 0.9")
    reasons: list[str] = []
    for attempt in range(max_attempts):
        rng = np.random.default_rng([seed, *salt, attempt])
        constants = [_draw_constants(lib[k], rng) for k in terms]
        parts = law_formula(dom.key, terms, constants)
        truth = _sum(parts)
        law = parse_expression(truth, dom.inputs)
        draw = _simulate(dom, law, rng, n_points, ood_fraction)
        if draw is None:
            reasons.append("integration failed or left the physical range")
            continue
        with np.errstate(all="ignore"):
            y_id, y_ood = law(draw.X_id), law(draw.X_ood)
        held = np.zeros(len(y_id), dtype=bool)
        held[rng.permutation(len(y_id))[: int(round(len(y_id) * test_fraction))]] = True
        train, test_id = Split(draw.X_id[~held], y_id[~held]), Split(draw.X_id[held], y_id[held])
        test_ood = Split(draw.X_ood, y_ood)
        why = _checks(dom, terms, parts, truth, train, test_id, test_ood)
        if why:
            reasons.append(why)
            continue
        break
    else:
        raise TaskError(f"{name}: no usable draw in {max_attempts} attempts (seed {seed}): {'; '.join(reasons)}")
    return Task(
        name=name,
        domain=DOMAIN_LABELS[dom.key],
        input_names=list(dom.inputs),
        input_descriptions=list(dom.descriptions),
        target_name=dom.target,
        target_description=dom.target_description,
        train=train,
        test_id=test_id,
        test_ood=test_ood,
        ground_truth=truth,
        metadata={
            "source": "lsr_like",
            "lsr_domain": dom.key,
            "terms": list(terms),
            "known_terms": [k for k in terms if lib[k].kind == "known"],
            "synthetic_terms": [k for k in terms if lib[k].kind == "synthetic"],
            "term_formulas": list(parts),
            "constants": constants,
            "template_formula": _sum([lib[k].formula.replace("{", "").replace("}", "") for k in terms]),
            "seed": seed,
            "attempt": attempt,
            "rejected_draws": reasons,
            **(metadata or {}),
            **({"horizon": dom.horizon, "initial_state": draw.initial,
                "ood_window": [float(draw.X_ood[:, 1 if dom.key == "phys_osc" else 0].min()), dom.horizon]}
               if dom.dynamic else
               {"strain_range": list(dom.strain), "temperature_id": list(dom.temperature_id),
                "temperature_ood": list(dom.temperature_ood)}),
        },
    )


def laws(domain: str, split: str = "all") -> list[tuple[int, Law]]:
    """(position, law) of a domain's curated laws in ``split``."""
    if split not in SPLITS:
        raise TaskError(f"split must be one of {SPLITS}, got {split!r}")
    key = get_domain(domain).key
    return [(i, law) for i, law in enumerate(LAWS[key]) if split == "all" or law.split == split]


@functools.lru_cache(maxsize=256)
def _cached_task(key: str, index: int, seed: int, n_points: int, ood_fraction: float, test_fraction: float) -> Task:
    catalogue = LAWS[key]
    if not catalogue:
        raise TaskError(f"lsr_like domain {key} has no curated laws")
    law = catalogue[index % len(catalogue)]
    return make_task(key, law.terms, f"{key}_lsr_{index:02d}", seed,
                     salt=(list(DOMAIN_SPECS).index(key), index), n_points=n_points, ood_fraction=ood_fraction,
                     test_fraction=test_fraction,
                     metadata={"split": law.split, "law": index % len(catalogue), "variant": index // len(catalogue)})


def generate_task(domain: str, index: int, seed: int = 0, *, n_points: int = N_POINTS,
                  ood_fraction: float = OOD_FRACTION, test_fraction: float = TEST_FRACTION) -> Task:
    """Task ``index`` of a domain: curated law ``index % n_laws`` (``index // n_laws`` is the constants' variant).
    Cached in memory: tasks are read-only by contract."""
    if index < 0:
        raise TaskError(f"index must be >= 0, got {index}")
    return _cached_task(get_domain(domain).key, index, seed, n_points, float(ood_fraction), float(test_fraction))


def task_indices(domain: str, n: int, split: str = "all") -> list[int]:
    """The first ``n`` task indices of ``split`` (laws in order, then their next constants' variants)."""
    key = get_domain(domain).key
    members = [i for i, _ in laws(key, split)]
    if not members:
        raise TaskError(f"lsr_like domain {key} has no {split} laws")
    k = len(LAWS[key])
    return [members[j % len(members)] + k * (j // len(members)) for j in range(n)]


def lsr_like_suite(n_per_domain: int = 3, domains: Iterable[str] | None = None, seed: int = 0, split: str = "all",
                   names: Iterable[str] | None = None, **options: float) -> list[Task]:
    """``n_per_domain`` tasks for each domain (all four by default) of ``split``; ``names``
    (``chem_react_lsr_03``) pick exact tasks. ``options``: n_points, ood_fraction, test_fraction."""
    if names is not None:
        out = []
        for name in names:
            key, sep, idx = str(name).rpartition("_lsr_")
            if not sep or not idx.isdigit():
                raise TaskError(f"lsr_like task names look like 'chem_react_lsr_03', got {name!r}")
            out.append(generate_task(key, int(idx), seed, **options))
        return out
    keys = [get_domain(d).key for d in (domains if domains is not None else DOMAIN_SPECS)]
    return [generate_task(key, i, seed, **options) for key in keys for i in task_indices(key, n_per_domain, split)]
