"""Tests of the demand-primitive dictionary (prism/primitives/dictionary.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prism.errors import ConfigError, DataContractError, NotFittedError
from prism.primitives.dictionary import (
    FIT_SCALE_FLOOR,
    Codes,
    PrimitiveDictionary,
    describe_atom,
    omp_gram,
    windows,
    znorm,
)

logger = logging.getLogger(__name__)

DAY = 144  # 10-minute steps
LENGTH = 288  # default lookback + horizon
STRIDE = 36
VCS = (
    "vc3sl vc6YE vc8Sj vcJLV vcJkd vcLJZ vcMod vcSoL vcTJs vccaA vcdI0 vcgkz vchbv vcira vcpDC "
    "vcvlY"
).split()


# -- synthetic series ------------------------------------------------------------------------


def sine_series(rng: np.random.Generator, n: int = 1008) -> np.ndarray:
    """Daily demand: a sine of random amplitude and phase, a weaker 2nd harmonic and noise."""
    t = np.arange(n)
    a = rng.uniform(10, 40)
    return (
        100
        + a * np.sin(2 * np.pi * t / DAY + rng.uniform(0, 2 * np.pi))
        + 0.3 * a * np.sin(4 * np.pi * t / DAY + rng.uniform(0, 2 * np.pi))
        + rng.normal(0, 0.1 * a, n)
    )


def pulse_series(rng: np.random.Generator, n: int = 1008, offset: int = 20) -> np.ndarray:
    """A new shape: a nightly 2-hour batch job (a narrow square pulse once a day)."""
    t = np.arange(n)
    return 20 + 40 * (((t - offset) % DAY) < 12) + rng.normal(0, 2, n)


def cut(series: list[np.ndarray]) -> np.ndarray:
    return np.vstack([windows(x, length=LENGTH, stride=STRIDE) for x in series])


def residual_share(d: PrimitiveDictionary, w: np.ndarray) -> float:
    """Pooled relative residual energy of windows, in z-space."""
    codes = d.encode(w)
    z, _, _ = znorm(w)
    zhat = (d.reconstruct(codes) - codes.mean[:, None]) / codes.scale[:, None]
    return float(((z - zhat) ** 2).sum() / (z**2).sum())


@pytest.fixture
def sine_dictionary() -> PrimitiveDictionary:
    """A small dictionary fitted on 20 noisy daily-sine series (a week each)."""
    rng = np.random.default_rng(0)
    return PrimitiveDictionary(n_atoms=8, max_iter=20).fit(
        [sine_series(rng) for _ in range(20)]
    )


# -- windows and znorm -----------------------------------------------------------------------


def test_windows_are_strided_read_only_views() -> None:
    x = np.arange(10.0)
    w = windows(x, length=4, stride=3)
    np.testing.assert_array_equal(w, [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]])
    assert np.shares_memory(w, x)
    assert not w.flags.writeable
    assert windows(x, length=11, stride=1).shape == (0, 11)
    assert windows(np.arange(4), length=4, stride=1).dtype == np.float64


def test_windows_reject_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="stride"):
        windows(np.arange(10.0), length=4, stride=0)
    with pytest.raises(DataContractError, match="1-D"):
        windows(np.zeros((3, 3)), length=2, stride=1)


def test_znorm_flat_and_near_flat_windows() -> None:
    w = np.array([[5.0, 5.0, 5.0, 5.0], [0.0, 0.0, 0.0, 0.01], [1.0, 3.0, 1.0, 3.0]])
    z, mean, scale = znorm(w)
    np.testing.assert_array_equal(z[0], 0.0)
    assert scale[0] == 1.0 and mean[0] == 5.0
    np.testing.assert_allclose(z[2], [-1, 1, -1, 1])
    assert z[1].std() == pytest.approx(1.0)  # without a floor a blip becomes a unit shape
    zf, _, scale_f = znorm(w, min_scale=1.0)  # a floor from the series' scale keeps it small
    assert scale_f[1] == 1.0 and zf[1].std() < 0.01
    np.testing.assert_allclose(zf[2], z[2])  # windows above the floor are unchanged
    with pytest.raises(DataContractError, match="NaN"):
        znorm(np.array([[1.0, np.nan]]))


@settings(max_examples=50, deadline=None)
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 30)),
               elements=st.floats(-1e6, 1e6)),
    st.floats(0.0, 10.0),
)
def test_znorm_round_trips(w: np.ndarray, floor: float) -> None:
    z, mean, scale = znorm(w, min_scale=floor)
    np.testing.assert_allclose(mean[:, None] + scale[:, None] * z, w, rtol=1e-9, atol=1e-6)
    assert np.all(scale > 0)
    assert np.all(z.std(axis=1) <= 1.0 + 1e-9)


# -- sparse coding ---------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 6])
def test_omp_matches_scikit_learn(k: int) -> None:
    from sklearn.linear_model import orthogonal_mp_gram

    rng = np.random.default_rng(k)
    atoms = rng.normal(size=(30, 50))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    x = rng.normal(size=(200, 50))
    gram, xy = atoms @ atoms.T, x @ atoms.T
    ours = omp_gram(gram, xy, k)
    reference = orthogonal_mp_gram(gram, xy.T, n_nonzero_coefs=k).T
    np.testing.assert_allclose(ours, reference, atol=1e-10)
    assert np.all((ours != 0).sum(axis=1) == k)


def test_omp_skips_dependent_atoms_and_zero_signals() -> None:
    rng = np.random.default_rng(0)
    atoms = rng.normal(size=(8, 20))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    atoms = np.vstack([atoms, atoms[:1]])  # an exact duplicate
    x = np.vstack([atoms[0] * 3, np.zeros(20), rng.normal(size=20)])
    c = omp_gram(atoms @ atoms.T, x @ atoms.T, 3)
    assert np.all(np.isfinite(c))
    assert np.count_nonzero(c[1]) == 0
    assert np.count_nonzero(c[2]) == 3
    np.testing.assert_allclose(c[0] @ atoms, x[0], atol=1e-9)


# -- the dictionary --------------------------------------------------------------------------


def test_fixed_atoms_ids_kinds_and_norms(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    # n_atoms as a numpy int, as it comes from a config array: save must still write JSON.
    d = PrimitiveDictionary(n_atoms=cast(int, np.int64(2)), periods=(144, 72, 3.0), n_harmonics=2,
                            n_trend=3, max_iter=3).fit([sine_series(rng)])
    # 72 duplicates the 2nd harmonic of 144; 3/2 is below 2 steps: neither gives atoms.
    assert d.atom_ids_ == [
        "trend_0", "trend_1", "trend_2",
        "fourier_p144_h1_sin", "fourier_p144_h1_cos", "fourier_p144_h2_sin",
        "fourier_p144_h2_cos", "fourier_p72_h2_sin", "fourier_p72_h2_cos",
        "fourier_p3_h1_sin", "fourier_p3_h1_cos", "learned_000", "learned_001",
    ]
    assert d.atom_kinds_ == ["trend"] * 3 + ["fourier"] * 8 + ["learned"] * 2
    assert d.atoms_.shape == (13, LENGTH)
    np.testing.assert_allclose(np.linalg.norm(d.atoms_, axis=1), 1.0)
    assert d.version_ == 1
    assert [e.atom_id for e in d.history_] == d.atom_ids_
    assert all(e.action == "added" for e in d.history_)
    assert list(d.usage_.index) == d.atom_ids_
    d.save(tmp_path / "d.npz")
    e = PrimitiveDictionary.load(tmp_path / "d.npz")
    assert e.periods == (144, 72, 3.0) and [type(p) for p in e.periods] == [int, int, float]
    assert e.atom_ids_ == d.atom_ids_


def test_fit_returns_self_and_does_not_touch_inputs(sine_dictionary: PrimitiveDictionary) -> None:
    rng = np.random.default_rng(2)
    series = [sine_series(rng) for _ in range(3)]
    before = [s.copy() for s in series]
    d = PrimitiveDictionary(n_atoms=4, max_iter=5)
    assert d.fit(series) is d
    for s, b in zip(series, before, strict=True):
        np.testing.assert_array_equal(s, b)
    assert type(d)(**d.get_params()).get_params() == d.get_params()


def test_not_fitted_raises() -> None:
    d = PrimitiveDictionary()
    w = np.zeros((1, LENGTH))
    with pytest.raises(NotFittedError, match="fit"):
        d.encode(w)
    with pytest.raises(NotFittedError):
        d.reconstruct(Codes(np.zeros((1, 1)), np.zeros(1), np.ones(1), "full", 1))
    with pytest.raises(NotFittedError):
        d.evolve(w)
    with pytest.raises(NotFittedError):
        d.save(Path("unused.npz"))


def test_bad_input_raises() -> None:
    rng = np.random.default_rng(3)
    good = [sine_series(rng)]
    with pytest.raises(ConfigError, match="sparsity"):
        PrimitiveDictionary(sparsity=0).fit(good)
    with pytest.raises(ConfigError, match="max_atoms"):
        PrimitiveDictionary(n_atoms=10, max_atoms=8).fit(good)
    with pytest.raises(ConfigError, match="learner"):
        PrimitiveDictionary(learner="pca").fit(good)
    bad = good[0].copy()
    bad[17] = np.nan
    with pytest.raises(DataContractError, match="step 17"):
        PrimitiveDictionary().fit([bad])
    with pytest.raises(DataContractError, match="non-flat windows"):
        PrimitiveDictionary(n_atoms=4).fit([np.ones(2000), np.arange(100.0)])
    d = PrimitiveDictionary(n_atoms=4, max_iter=3).fit(good)
    with pytest.raises(DataContractError, match=r"\(n_windows, 144\)"):
        d.encode(np.zeros((2, LENGTH)), part="lookback")
    with pytest.raises(ConfigError, match="part"):
        d.encode(np.zeros((2, LENGTH)), part="horizon")  # type: ignore[arg-type]


def test_same_seed_same_atoms() -> None:
    rng = np.random.default_rng(4)
    series = [sine_series(rng) for _ in range(6)]
    a = PrimitiveDictionary(n_atoms=6, max_iter=10, random_state=7).fit(series)
    b = PrimitiveDictionary(n_atoms=6, max_iter=10, random_state=7).fit(series)
    c = PrimitiveDictionary(n_atoms=6, max_iter=10, random_state=8).fit(series)
    np.testing.assert_array_equal(a.atoms_, b.atoms_)
    assert a.atom_ids_ == b.atom_ids_
    assert not np.allclose(a.atoms_, c.atoms_)
    w = cut(series[:2])
    np.testing.assert_array_equal(a.encode(w).coefs, b.encode(w).coefs)


@pytest.mark.parametrize("learner", ["kmeans", "mbdl"])
def test_other_learners_give_unit_atoms(learner: str) -> None:
    rng = np.random.default_rng(5)
    d = PrimitiveDictionary(n_atoms=4, max_iter=3, learner=learner).fit(
        [sine_series(rng) for _ in range(4)]
    )
    np.testing.assert_allclose(np.linalg.norm(d.atoms_, axis=1), 1.0)
    assert residual_share(d, cut([sine_series(rng)])) < 0.35


def test_encode_reconstruct_in_series_units(sine_dictionary: PrimitiveDictionary) -> None:
    rng = np.random.default_rng(6)
    w = cut([sine_series(rng)])
    codes = sine_dictionary.encode(w)
    assert codes.coefs.shape == (len(w), len(sine_dictionary.atoms_))
    assert np.all((codes.coefs != 0).sum(axis=1) <= sine_dictionary.sparsity)
    rebuilt = sine_dictionary.reconstruct(codes)
    # Noise is 10 % of the amplitude: the residual share is about the noise share (~2 %).
    assert ((w - rebuilt) ** 2).sum() / ((w - w.mean(axis=1, keepdims=True)) ** 2).sum() < 0.05
    flat = np.full((1, LENGTH), 42.0)
    np.testing.assert_allclose(sine_dictionary.reconstruct(sine_dictionary.encode(flat)), flat)
    np.testing.assert_array_equal(sine_dictionary.encode(w).coefs, codes.coefs)  # pure


def test_lookback_codes_extrapolate_a_pure_sine(sine_dictionary: PrimitiveDictionary) -> None:
    t = np.arange(LENGTH)
    errors = []
    for phase in np.linspace(0, 2 * np.pi, 16, endpoint=False):
        x = 50 + 20 * np.sin(2 * np.pi * t / DAY + phase)
        codes = sine_dictionary.encode(x[:DAY], part="lookback")
        assert codes.part == "lookback"
        horizon = sine_dictionary.reconstruct(codes, part="horizon")[0]
        assert horizon.shape == (DAY,)
        errors.append(np.sqrt(np.mean((horizon - x[DAY:]) ** 2)) / 20)
    # A flat forecast at the mean would be off by 0.71 of the amplitude.
    logger.info("sine extrapolation RMSE / amplitude: median %.3f, max %.3f",
                np.median(errors), np.max(errors))
    assert np.median(errors) < 0.05
    assert np.max(errors) < 0.15


def test_lookback_codes_are_exact_with_fourier_atoms() -> None:
    rng = np.random.default_rng(7)
    d = PrimitiveDictionary(n_atoms=0, periods=(DAY,), n_harmonics=1, n_trend=0,
                            sparsity=2).fit([sine_series(rng)])
    t = np.arange(LENGTH)
    x = 50 + 20 * np.sin(2 * np.pi * t / DAY + 1.3)
    horizon = d.reconstruct(d.encode(x[:DAY], part="lookback"), part="horizon")[0]
    np.testing.assert_allclose(horizon, x[DAY:], atol=1e-8)


def test_explained_share_adds_up_to_the_explained_energy(
    sine_dictionary: PrimitiveDictionary,
) -> None:
    rng = np.random.default_rng(8)
    w = cut([sine_series(rng), pulse_series(rng)])
    codes = sine_dictionary.encode(w)
    shares = sine_dictionary.explained_share(w, codes)
    assert shares.shape == (len(sine_dictionary.atoms_),)
    assert shares.sum() == pytest.approx(1.0 - residual_share(sine_dictionary, w), abs=1e-9)
    assert np.all(shares[(codes.coefs != 0).sum(axis=0) == 0] == 0)
    with pytest.raises(DataContractError, match="windows but codes"):
        sine_dictionary.explained_share(w[:3], codes)


def test_usage_frame(sine_dictionary: PrimitiveDictionary) -> None:
    u = sine_dictionary.usage_
    assert list(u.columns) == ["kind", "label", "n_active", "active_rate", "share", "idle"]
    learned = u[u["kind"] == "learned"]
    assert (learned["n_active"] > 0).all()
    assert (learned["label"] == "periodic").all()
    assert u["share"].sum() == pytest.approx(1.0 - sine_dictionary.train_residual_, abs=1e-9)


# -- evolving dictionary ---------------------------------------------------------------------


def test_evolve_leaves_a_stationary_dictionary_alone(
    sine_dictionary: PrimitiveDictionary,
) -> None:
    atoms = sine_dictionary.atoms_.copy()
    history = list(sine_dictionary.history_)
    rng = np.random.default_rng(9)
    for _ in range(6):
        assert sine_dictionary.evolve(cut([sine_series(rng) for _ in range(4)])) == []
    assert sine_dictionary.version_ == 1
    np.testing.assert_array_equal(sine_dictionary.atoms_, atoms)
    assert sine_dictionary.history_ == history


def test_evolve_learns_a_new_shape_then_retires_unused_atoms(
    sine_dictionary: PrimitiveDictionary,
) -> None:
    d = sine_dictionary
    d.retire_after = 400  # windows; the pulse regime below lasts 4 x 63 windows
    rng = np.random.default_rng(10)
    pulses = cut([pulse_series(rng) for _ in range(3)])
    before = residual_share(d, pulses)
    assert before > d.residual_threshold
    changes: list[list[str]] = [d.evolve(pulses) for _ in range(d.patience)]
    assert changes[:-1] == [[]] * (d.patience - 1)  # patience: not after one poor call
    added = changes[-1]
    assert added and all(a.startswith("learned_") for a in added)
    assert d.version_ == 2
    assert set(added) <= set(d.atom_ids_)
    assert [e.atom_id for e in d.history_ if e.action == "added" and e.version == 2] == added
    after = residual_share(d, pulses)
    logger.info("pulse windows: residual share %.3f -> %.3f with %s", before, after, added)
    assert after < d.residual_threshold / 2
    old_codes = d.encode(pulses[:2])
    # Back to daily sines: the pulse atoms fall idle and retire, the sine atoms stay.
    retired: list[str] = []
    for _ in range(10):
        retired += d.evolve(cut([sine_series(rng) for _ in range(4)]))
    assert set(added) <= set(retired)
    assert set(retired).isdisjoint(d.atom_ids_)
    assert {e.atom_id for e in d.history_ if e.action == "retired"} == set(retired)
    assert residual_share(d, cut([sine_series(rng)])) < 0.05
    assert "trend_1" in d.atom_ids_  # fixed atoms never retire, used or not
    with pytest.raises(DataContractError, match="version"):
        d.reconstruct(old_codes)


def test_evolve_respects_max_atoms(sine_dictionary: PrimitiveDictionary) -> None:
    d = sine_dictionary
    d.max_atoms = len(d.atoms_) + 1
    rng = np.random.default_rng(11)
    pulses = cut([pulse_series(rng) for _ in range(3)])
    added = [a for _ in range(d.patience) for a in d.evolve(pulses)]
    assert len(added) == 1 and len(d.atoms_) == d.max_atoms


# -- persistence -----------------------------------------------------------------------------


def test_save_load_round_trip(sine_dictionary: PrimitiveDictionary, tmp_path: Path) -> None:
    d = sine_dictionary
    rng = np.random.default_rng(12)
    pulses = cut([pulse_series(rng) for _ in range(3)])
    d.evolve(pulses)  # mid-streak: pending windows and the streak must survive the round trip
    path = tmp_path / "dictionary.npz"
    d.save(path)
    e = PrimitiveDictionary.load(path)
    assert e.get_params() == d.get_params()
    np.testing.assert_array_equal(e.atoms_, d.atoms_)
    assert (e.atom_ids_, e.atom_kinds_, e.version_) == (d.atom_ids_, d.atom_kinds_, d.version_)
    assert e.history_ == d.history_
    pd.testing.assert_frame_equal(e.usage_, d.usage_)
    w = cut([sine_series(rng)])
    for part, x in (("full", w), ("lookback", w[:, :DAY])):
        a, b = d.encode(x, part=part), e.encode(x, part=part)  # type: ignore[arg-type]
        np.testing.assert_array_equal(a.coefs, b.coefs)
        np.testing.assert_array_equal(d.reconstruct(a), e.reconstruct(b))
    for _ in range(d.patience - 1):
        assert d.evolve(pulses) == e.evolve(pulses)
    np.testing.assert_array_equal(e.atoms_, d.atoms_)
    assert e.version_ == d.version_ == 2


def test_load_rejects_other_files(tmp_path: Path) -> None:
    path = tmp_path / "other.npz"
    np.savez(path, x=np.zeros(3))
    with pytest.raises(ConfigError, match="not a saved PrimitiveDictionary"):
        PrimitiveDictionary.load(path)


# -- atom labels -----------------------------------------------------------------------------

_T = np.arange(LENGTH)
_NOISE = np.random.default_rng(13).normal(0, 0.02, LENGTH)
SHAPES: dict[str, tuple[Callable[[], np.ndarray], str]] = {
    "ramp": (lambda: -_T / LENGTH + _NOISE, "ramp"),
    "step": (lambda: (_T < 200) * 1.0 + _NOISE, "step"),
    "burst": (lambda: np.where(_T >= 80, np.exp(-(_T - 80) / 15.0), 0.0) + _NOISE, "burst-decay"),
    "plateau": (lambda: 1 / (1 + np.exp(-(_T - 100) / 3)) - 1 / (1 + np.exp(-(_T - 180) / 3)),
                "plateau"),
    "periodic": (lambda: np.cos(2 * np.pi * _T / 48) + 0.2 * np.sin(2 * np.pi * _T / 24),
                 "periodic"),
    "flat": (lambda: np.ones(LENGTH), "plateau"),
    "noise": (lambda: np.random.default_rng(0).normal(size=LENGTH), "irregular"),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_describe_atom(name: str) -> None:
    make, label = SHAPES[name]
    assert describe_atom(make()) == label
    assert describe_atom(-make()) == label  # signs of learned atoms are arbitrary


# -- real traces: Helios Earth VCs -----------------------------------------------------------


@pytest.fixture(scope="module")
def helios(traces: Path) -> dict[str, np.ndarray]:
    """GPUs in use and demand (running + pending) of the 16 Earth VCs, 10-minute means."""
    out = {}
    for vc in VCS:
        h = pd.read_csv(
            traces / "helios_earth_vc" / f"earth_{vc}_1min.csv.gz", parse_dates=["time"],
            index_col="time", usecols=["time", "running_gpu_num", "pending_gpu_num"],
        )
        out[f"{vc}/running"] = h["running_gpu_num"].resample("10min").mean().to_numpy()
        demand = h["running_gpu_num"] + h["pending_gpu_num"]
        out[f"{vc}/demand"] = demand.resample("10min").mean().to_numpy()
    assert all(len(v) == 4464 for v in out.values())
    return out


def test_helios_dictionary_beats_pca_and_fourier_atoms(
    helios: dict[str, np.ndarray], record_property: Callable[[str, object], None]
) -> None:
    from sklearn.decomposition import PCA

    split = 3 * 7 * DAY  # first 3 weeks to fit, last 10 days held out
    train = [x[:split] for x in helios.values()]

    def z_windows(part: slice) -> np.ndarray:
        zs = [
            znorm(windows(x[part], length=LENGTH, stride=STRIDE),
                  min_scale=FIT_SCALE_FLOOR * x[:split].std())[0]
            for x in helios.values()
        ]
        z = np.vstack(zs)
        return z[(z**2).sum(axis=1) > 0]

    z_train, z_test = z_windows(slice(0, split)), z_windows(slice(split, None))
    assert len(z_test) > 900

    def error(zhat: np.ndarray) -> float:
        return float(((z_test - zhat) ** 2).sum() / (z_test**2).sum())

    periods = (DAY, 7 * DAY)
    d = PrimitiveDictionary(periods=periods, max_iter=10).fit(train)
    s = d.sparsity
    ours = error(d.reconstruct(d.encode(z_test)))
    pca = PCA(s).fit(z_train)
    pca_error = error(pca.inverse_transform(pca.transform(z_test)))
    fourier = PrimitiveDictionary(n_atoms=0, n_trend=0, periods=periods).fit(train)
    fourier_error = error(fourier.reconstruct(fourier.encode(z_test)))
    ratios = {"pca": ours / pca_error, "fourier": ours / fourier_error}
    logger.info(
        "Helios held-out relative error at sparsity %d: dictionary %.3f, PCA %.3f, Fourier %.3f;"
        " ratios %s", s, ours, pca_error, fourier_error, ratios,
    )
    record_property("helios_ratio_pca", round(ratios["pca"], 3))
    record_property("helios_ratio_fourier", round(ratios["fourier"], 3))
    # Measured 0.35 vs 0.54 (PCA) and 0.51 (Fourier): ratios about 0.65 and 0.69.
    assert ratios["pca"] < 0.8
    assert ratios["fourier"] < 0.8
