"""Which runs each of the book's experiments needs, and their tables."""

import pytest

from maskfed.fl import experiments
from maskfed.fl.config import load_profile


def test_the_paper_grid_is_36_distinct_runs():
    # prepare: Table I is 9 protocols, Table II 3 alphas (its alpha = 100 run is Table I's bs 32, tau 2),
    # the control 1 setting; 3 seeds each
    prof = load_profile("paper")
    # execute
    per = {e: experiments.configs(prof, e) for e in experiments.EXPERIMENTS}
    every = experiments.all_configs(prof)
    # assert
    assert {e: len(c) for e, c in per.items()} == {"table1": 27, "table2": 9, "control": 3}
    assert len(every) == len(set(every)) == 27 + 6 + 3
    shared = set(per["table1"]) & set(per["table2"])
    assert {(c.batch_size, c.local_epochs, c.alpha) for c in shared} == {(32, 2, 100.0)}
    assert experiments.all_configs(prof, ["table2"]) == per["table2"]


def test_an_unknown_experiment_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"experiment must be one of \['table1', 'table2', 'control'\]; got 'table3'"):
        experiments.configs(load_profile("smoke"), "table3")


def test_tables_have_the_papers_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path))
    prof = load_profile("smoke", rounds=2, num_clients=4, cohort_size=2, synthetic_train=200, synthetic_test=50,
                        width=2, table2={"alphas": [100, 1]})
    results = experiments.run(prof, "table2", workers=1, progress=False)
    table = experiments.table2(results)
    assert list(table.columns) == experiments.TABLE_COLUMNS
    assert list(table.index) == [100.0, 1.0]
    prov = experiments.provenance_table(results)
    assert len(prov) == 2 and (prov["rounds"] == 2).all()
