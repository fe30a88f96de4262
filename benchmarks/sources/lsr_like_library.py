"""The lsr_like catalogue: per-domain term libraries (known and synthetic terms), the domains' sampling ranges and
the curated laws; :mod:`benchmarks.sources.lsr_like` turns a law into data. Kept apart so the catalogue can be read
(and curated) without the simulation code."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from benchmarks.sources.lsr_synth import DOMAIN_LABELS, DOMAINS as LSR_DOMAINS
from harness.core.task import TaskError

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
    settles: bool = False  # a law with this term is heavily damped (its data are checked as such)


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


def _t(key: str, formula: str, kind: str, half: str = "", note: str = "", settles: bool = False,
       **ranges: tuple[float, float]) -> Term:
    return Term(key, formula, tuple((n, lo, hi) for n, (lo, hi) in ranges.items()), kind, half, note, settles)


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
        # LSR-Synth's two regimes that the terms above rarely reach: a trajectory that settles (most targets
        # below 1e-3 of the largest, only the exact law passes relative accuracy) and a self-sustained one
        _t("heavy_damping", "-{b}*v", "known", note="heavy linear damping (the trajectory settles)", settles=True,
           b=(1.0, 2.5)),
        _t("van_der_pol", "{c}*(1 - {k}*x**2)*v", "known", note="van der Pol self-excitation (a limit cycle)",
           c=(0.1, 0.5), k=(0.5, 2.0)),
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
        # LSR-Synth's two oscillator regimes as training laws (issue 46): the first two kept of each, in the order
        # given, by `curate_lsr_like.py --seconds 10 60 120 --law phys_osc:...` (docs/benchmarks.md)
        Law(('harmonic', 'heavy_damping', 'soft_spring'), 'train'),
        Law(('duffing', 'van_der_pol', 'parametric'), 'train'),
        Law(('pendulum', 'heavy_damping', 'cubic_damping'), 'train'),
        Law(('pendulum', 'van_der_pol', 'parametric'), 'train'),
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


def check_terms(domain: str, terms: Sequence[str]) -> None:
    """A TaskError naming the terms ``domain``'s library does not have."""
    lib = TERMS[domain]
    missing = [k for k in terms if k not in lib]
    if missing:
        raise TaskError(f"{domain}: unknown term(s) {missing}; terms: {sorted(lib)}")


def law_split(domain: str, terms: Sequence[str]) -> str:
    """'train' or 'test': the half of the law's synthetic terms (all from one half, else a TaskError)."""
    check_terms(domain, terms)
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
