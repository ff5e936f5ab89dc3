"""Accuracy guard: ``(model, max_mase)`` on a fixed slice of the real Helios Earth traces.

Five VCs (``gpus_in_use`` at 10 min, May 2020), 1-day horizon, 3 daily cutoffs ending at the
last point (the slowest models, ``arima`` and ``mstl``, the last one only: 3 took them 48 s and
16 s of the suite). The limits are the MASE measured when each model landed plus 5 %: a change
that makes a model clearly worse here fails. (PRISM's 1.670 is naive's: on this slice its stacker
finds nothing that beats the last value and keeps it.) The full comparison is the accuracy benchmark
(``python -m evaluation.benchmarks.accuracy``), not this test.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from prism.evaluation.backtest import backtest
from prism.evaluation.metrics import avg_rel_mae, evaluate, summary
from prism.forecasters import FORECASTERS, get_forecaster
from prism.ingest.pipeline import ingest
from prism.store import Store

VCS = ("vc6YE", "vcvlY", "vc3sl", "vchbv", "vcira")
#: (model, MASE when it landed, slow); the limit is 5 % above.
TABLE = [
    ("naive", 1.670, False),
    ("seasonal_naive", 1.316, False),
    ("window_average", 1.274, False),
    ("time_of_day_quantile", 1.152, False),
    ("theta", 1.590, False),
    ("ets", 1.614, True),
    ("prism", 1.670, False),
    ("gru", 1.318, True),
    ("lstm", 1.332, False),
    ("gbm", 1.450, True),
    ("arima", 0.636, True),  # over the last cutoff only (ONE_WINDOW); 1.603 over 3
    ("mstl", 1.886, True),  # the same; 2.606 over 3
]
#: Models scored on the last cutoff only (each fit is seconds per series).
ONE_WINDOW = {"arima", "mstl"}


@pytest.fixture(scope="module")
def helios(traces: Path) -> pd.DataFrame:
    with Store.open(":memory:") as store:
        ingest(store, [traces / "helios_earth_vc" / f"earth_{vc}_1min.csv.gz" for vc in VCS],
               "helios-vc")
        return store.load_panel([f"earth/{vc}/gpus_in_use" for vc in VCS])


def test_every_forecaster_is_in_the_table() -> None:
    assert {model for model, _, _ in TABLE} == set(FORECASTERS)


@pytest.mark.parametrize(
    ("alias", "landed"),
    [pytest.param(a, m, id=a, marks=[pytest.mark.slow] if slow else [])
     for a, m, slow in TABLE if a != "prism"],  # PRISM's: in the test below, one fit
)
def test_mase_on_the_helios_slice(helios: pd.DataFrame, alias: str, landed: float) -> None:
    windows = 1 if alias in ONE_WINDOW else 3
    frame = backtest({alias: get_forecaster(alias)}, helios, horizon="1d", windows=windows)
    mase = float(summary(frame, helios)["mase"].iloc[0])
    assert mase <= 1.05 * landed, f"{alias}: MASE {mase:.4f}, landed at {landed}"


@pytest.mark.slow
def test_prism_never_loses_to_the_last_value_on_the_slice(helios: pd.DataFrame) -> None:
    # On these VCs nothing measurably beats the last value a day ahead (the headroom study of
    # the accuracy issue): PRISM's stacker has to see that and keep the last value, not chase
    # noise. AvgRelMAE is the geometric mean over windows of PRISM's MAE over naive's.
    models = {"prism": get_forecaster("prism"), "naive": get_forecaster("naive")}
    frame = backtest(models, helios, horizon="1d", windows=3)
    table = avg_rel_mae(evaluate(frame, helios)).set_index("model")
    assert table.loc["prism", "avg_rel_mae"] <= 1.0
    # and its MASE guard, as every model's above
    landed = next(m for a, m, _ in TABLE if a == "prism")
    mase = float(summary(frame, helios).set_index("model").loc["prism", "mase"])
    assert mase <= 1.05 * landed, f"prism: MASE {mase:.4f}, landed at {landed}"
