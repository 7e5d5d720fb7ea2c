"""The run archive: copying finished runs, reading them back (malformed folders skipped),
the provenance label, matching archived runs to a profile, and per-profile summaries."""

import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from maskfed import cli, provenance

from maskfed.studies import archive

from maskfed.engine import runner
from maskfed.engine.config import load_profile, make_run_config
from maskfed.studies import experiments

TINY = dict(dataset="synthetic", synthetic_train=200, synthetic_test=50, num_clients=4, cohort_size=2, rounds=2,
            model="small_cnn_gn", width=2, batch_size=16, local_epochs=1, eval_every=1)


@pytest.fixture(autouse=True)
def dirs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(tmp_path / "archive"))
    return tmp_path


def fake_run(folder, cfg, *, recovery, acc=0.5, code_hash=None, finished="2026-12-01T10:00:00+00:00",
             commit="a" * 40, dirty=False, device="cpu", cuda=None, cpu_model=None):
    """Write a finished run folder by hand: constant per-round metrics, so its summary is known."""
    folder.mkdir(parents=True)
    r = np.arange(1, cfg.rounds + 1)
    given = {"round": r, "T_mean": 4.0, "recovery_unweighted": recovery, "recovery_weighted": recovery,
             "mu2_hat": 1.0, "sigma2_hat": 2.0, "test_acc": acc, "train_loss": 1.0}
    pd.DataFrame({c: given.get(c, 0.0) for c in runner.expected_columns(cfg)}).to_csv(folder / "metrics.csv", index=False)
    (folder / "config.json").write_text(cfg.model_dump_json())
    (folder / "partition.json").write_text(json.dumps({"sizes": [1], "min": 1, "max": 1}))
    machine = {"device": device, "processor": "x86_64", **({"cuda_device": cuda} if cuda else {}),
               **({"cpu_model": cpu_model} if cpu_model else {})}
    (folder / "provenance.json").write_text(json.dumps({
        "seed": cfg.seed, "code_hash": code_hash or provenance.code_hash(), "commit": commit, "dirty": dirty,
        "machine": machine, "finished_utc": finished}))
    archive.write_manifest(folder)  # as archive_runs does, last
    return folder


def test_archive_runs_copies_small_files_and_reads_back(dirs_in_tmp):
    # two real (tiny) runs, one with an extra file in its folder that must not be archived
    cfgs = [make_run_config(**TINY), make_run_config(**{**TINY, "batch_size": "full"})]
    results = runner.run_many(cfgs, workers=1, progress=False, keep_every={cfgs[1]: 1})  # the second keeps θ
    (results[0].path / "scratch.bin").write_bytes(b"x" * 10)
    folders = archive.archive_runs(results, "smoke")
    back = archive.load_archive("smoke")
    assert [f.parent for f in folders] == [dirs_in_tmp / "archive" / "smoke"] * 2
    assert [f.name for f in folders] == [r.path.name for r in results]
    assert sorted(p.name for p in folders[0].iterdir()) == sorted(archive.FILES + (archive.MANIFEST,))
    assert sorted(p.name for p in folders[1].iterdir()) == sorted(archive.FILES + archive.OPTIONAL_FILES
                                                                  + (archive.MANIFEST,))
    kept = runner.load_thetas(folders[1])
    assert sorted(kept) == [0, 1, 2] and all(torch.equal(kept[r], t) for r, t in runner.load_thetas(results[1].path).items())
    assert sorted(r.path.name for r in back) == sorted(r.path.name for r in results)
    for r in results:
        b = next(x for x in back if x.path.name == r.path.name)
        assert b.config == r.config and b.provenance == r.provenance
        pd.testing.assert_frame_equal(b.metrics, r.metrics)
    # archiving again replaces the folders (same runs), leaving no temporary folder behind
    archive.archive_runs(results, "smoke")
    assert sorted(p.name for p in (dirs_in_tmp / "archive" / "smoke").iterdir()) == sorted(f.name for f in folders)


def test_archive_runs_refuses_unfinished_folders_and_unknown_profiles(dirs_in_tmp):
    cfg = make_run_config(**TINY)
    done = fake_run(dirs_in_tmp / "runs" / "a", cfg, recovery=2.0)
    (done / "provenance.json").unlink()
    r = runner.RunResult(cfg, done, pd.DataFrame(), {})
    with pytest.raises(ValueError, match="provenance.json"):
        archive.archive_runs([r], "smoke")
    assert not (dirs_in_tmp / "archive" / "smoke").exists()  # nothing copied
    with pytest.raises(ValueError, match=r"^profile_name .*'smoke'.*'laptop'"):
        archive.archive_runs([], "laptop")
    with pytest.raises(ValueError, match=r"^profile_name .*'smoke'.*'laptop'"):
        archive.load_archive("laptop")
    assert archive.load_archive("cpu-long") == []  # no archive: empty


def test_load_archive_skips_malformed_folders_with_a_warning(dirs_in_tmp):
    root = dirs_in_tmp / "archive" / "smoke"
    cfg = make_run_config(**TINY)
    fake_run(root / "good", cfg, recovery=2.0)
    fake_run(root / "no-provenance", cfg.model_copy(update={"seed": 1}), recovery=2.0)
    (root / "no-provenance" / "provenance.json").unlink()
    fake_run(root / "bad-json", cfg.model_copy(update={"seed": 2}), recovery=2.0)
    (root / "bad-json" / "config.json").write_text("{not json")
    fake_run(root / "short", cfg.model_copy(update={"seed": 3, "rounds": 5}), recovery=2.0)
    pd.read_csv(root / "short" / "metrics.csv").head(3).to_csv(root / "short" / "metrics.csv", index=False)
    fake_run(root / "unknown-field", cfg.model_copy(update={"seed": 4}), recovery=2.0)
    (root / "unknown-field" / "config.json").write_text(json.dumps({**cfg.model_dump(mode="json"), "warp": 9}))
    (root / ".tmp-half-written").mkdir()  # an interrupted copy: ignored silently

    with pytest.warns(UserWarning) as caught:
        back = archive.load_archive("smoke")

    assert [r.path.name for r in back] == ["good"]
    messages = " | ".join(str(w.message) for w in caught)
    for name, reason in [("no-provenance", "provenance.json"), ("bad-json", "config.json is not valid JSON"),
                         ("short", "3 rows for a 5-round run"),
                         ("unknown-field", "config.json is not a run configuration this code can read")]:
        assert f"{name}: " in messages and reason in messages
    assert ".tmp-half-written" not in messages


def test_load_archive_keeps_the_newest_of_duplicate_runs(dirs_in_tmp):
    root = dirs_in_tmp / "archive" / "smoke"
    cfg = make_run_config(**TINY)
    fake_run(root / "old", cfg, recovery=2.0, finished="2026-12-01T10:00:00+00:00", code_hash="0" * 16)
    fake_run(root / "new", cfg.model_copy(update={"device": "cuda"}), recovery=3.0,
             finished="2026-12-02T10:00:00+00:00")  # the same run made on another device
    with pytest.warns(UserWarning, match=r"newer new$"):
        back = archive.load_archive("smoke")
    assert [r.path.name for r in back] == ["new"]


def test_label_names_the_cpu_model_when_recorded(dirs_in_tmp):
    # runs on two CPU models are two machines (float32 trajectories differ between them)
    root = dirs_in_tmp / "archive" / "cpu-long"
    cfg = make_run_config(**TINY)
    runs = [runner.load_run(fake_run(root / "a", cfg, recovery=2.0, cpu_model="AMD EPYC 9B14")),
            runner.load_run(fake_run(root / "b", cfg.model_copy(update={"seed": 1}), recovery=2.0)),
            runner.load_run(fake_run(root / "c", cfg.model_copy(update={"seed": 2}), recovery=2.0,
                                     cpu_model="Intel Xeon"))]
    assert archive.label(runs, "cpu-long").devices == ["cpu (AMD EPYC 9B14)", "cpu (Intel Xeon)", "cpu (x86_64)"]


def test_label_names_devices_dates_commits_and_a_code_change(dirs_in_tmp, monkeypatch):
    root = dirs_in_tmp / "archive" / "paper"
    cfg = make_run_config(**TINY)
    a = fake_run(root / "a", cfg, recovery=2.0, code_hash="1111222233334444", finished="2026-12-01T23:00:00+00:00",
                 commit="abcdef0123" + "9" * 30, device="cuda", cuda="NVIDIA H200")
    b = fake_run(root / "b", cfg.model_copy(update={"seed": 1}), recovery=2.0, code_hash="1111222233334444",
                 finished="2026-12-03T01:00:00+00:00", commit="0123456789" + "8" * 30, dirty=True,
                 device="cuda", cuda="NVIDIA H200")
    runs = [runner.load_run(a), runner.load_run(b)]
    monkeypatch.setattr(provenance, "code_hash", lambda: "1111222233334444")
    same = archive.label(runs, "paper")
    assert (same.runs, same.devices, same.first_utc[:10], same.last_utc[:10]) == (
        2, ["cuda (NVIDIA H200)"], "2026-12-01", "2026-12-03")
    assert same.commits == ["0123456789+dirty", "abcdef0123"] and same.code_changed is False
    assert same.status == "same code"
    rec = same.record()
    assert (rec["runs"], rec["device"], rec["first finished"], rec["last finished"], rec["commit"], rec["run code"]) == (
        2, "cuda (NVIDIA H200)", "2026-12-01", "2026-12-03", "0123456789+dirty, abcdef0123", "1111222233334444")
    monkeypatch.setattr(provenance, "code_hash", lambda: "ffffeeeeddddcccc")
    changed = archive.label(runs, "paper")
    assert changed.code_changed is True
    assert changed.status == "code changed"
    assert (changed.record()["run code"], changed.record()["this code"]) == ("1111222233334444", "ffffeeeeddddcccc")
    with pytest.raises(ValueError, match="no archived runs"):
        archive.label([], "paper")


def test_select_ignores_where_a_run_ran_but_not_what_it_computed():
    base = make_run_config(**TINY)
    moved = base.model_copy(update={"data_path": "/elsewhere", "device": "cpu"})
    other = base.model_copy(update={"lr": 0.02})
    runs = [runner.RunResult(c, None, None, {}) for c in (moved, other)]
    assert archive.select(runs, [other, base]) == [runs[1], runs[0]]  # order of the configs
    assert archive.select(runs, [base.model_copy(update={"rounds": 3})]) == []


@pytest.mark.slow
def test_summaries_per_profile_never_pooled_and_notes_for_absent_archives(dirs_in_tmp):
    # a full cpu-long Table I archive with 1/Δ_S = 2 everywhere except bs 32, τ 1 (= 5),
    # a second run of that setting in the *paper* archive with 1/Δ_S = 9, and one extra cpu-long
    # run that belongs to no Table I setting (α = 1: a Table II run).
    long = load_profile("cpu-long")
    for c in experiments.configs(long, "table1"):
        fake_run(dirs_in_tmp / "archive" / "cpu-long" / c.label(), c,
                 recovery=5.0 if (c.batch_size, c.local_epochs) == (32, 1) else 2.0)
    t2 = experiments.configs(long, "table2")[1]
    fake_run(dirs_in_tmp / "archive" / "cpu-long" / t2.label(), t2, recovery=100.0)
    paper_cfg = experiments.configs(load_profile("paper"), "table1")[0]  # bs 32, τ 1, seed 0
    fake_run(dirs_in_tmp / "archive" / "paper" / paper_cfg.label(), paper_cfg, recovery=9.0, device="cuda",
             cuda="NVIDIA H200")
    found, notes = archive.summaries("table1", live="cpu")
    # one summary per profile, each from its own runs only
    assert [a.profile for a in found] == ["paper", "cpu-long"]  # closest to the paper's setting first
    found = found[::-1]
    long_t, paper_t = found[0].table, found[1].table
    assert long_t.loc[("32", 1), "recovery_unweighted"] == 5.0
    assert (long_t["recovery_unweighted"].drop(("32", 1)) == 2.0).all()  # the α = 1 run was not pooled in
    assert len(long_t) == 9 and found[0].missing == [] and found[0].label.runs == 9
    assert list(paper_t.index) == [("32", 1)] and paper_t["recovery_unweighted"].item() == 9.0
    assert len(found[1].missing) == 9 * 3 - 1 and found[1].label.devices == ["cuda (NVIDIA H200)"]
    assert [(n.profile, n.status) for n in notes] == [("cpu-paper", "not archived")]  # no cpu-paper archive here
    notes = []
    m = found[1].results[0].metrics
    m["recovery_unweighted"] = 9.0 * 1.01 ** m["round"]   # rising 1 % a round
    assert (found[1].trends()["falling"], found[1].trends()["rising"]) == (0, 1)
    row = archive.archive_table(found, notes).loc["paper profile (archived)"]
    assert (row["runs"], row["falling"], row["flat"], row["rising"]) == (1, 0, 0, 1)
    m["recovery_unweighted"] = 9.0 * 0.99 ** m["round"]   # falling 1 % a round
    assert found[1].trends()["falling"] == 1
    assert archive.archive_table(found, notes).loc["paper profile (archived)", "falling"] == 1
    # the live profile is left out by default; an explicit list is used as given
    assert [a.profile for a in archive.summaries("table1", live="cpu-long")[0]] == ["paper"]
    assert [a.profile for a in archive.summaries("table1", live="cpu-long", profiles=["cpu-long"])[0]] == ["cpu-long"]
    # Table II reads the α runs only: α = 1 present, α = 100 (the Table I run bs 32, τ 2) too, α = 0.1 missing
    t2_found, _ = archive.summaries("table2", live="cpu", profiles=["cpu-long"])
    assert list(t2_found[0].table.index) == [100.0, 1.0]
    assert t2_found[0].table.loc[1.0, "recovery_unweighted"] == 100.0
    assert t2_found[0].missing == [experiments.configs(long, "table2")[2].label()]
    with pytest.raises(ValueError, match=r"^experiment .*'table1'.*got 'control'"):
        archive.summaries("control")


def test_summaries_without_archive_say_how_to_make_one():
    # no archive at all (the test's own empty archive folder)
    found, notes = archive.summaries("table1", live="smoke")
    # one absent-archive record per book profile, each with the commands that make its archive
    assert found == []
    assert [(n.profile, n.experiment, n.status) for n in notes] == [
        ("paper", "table1", "not archived"), ("cpu-paper", "table1", "not archived"),
        ("cpu-long", "table1", "not archived")]
    assert archive.how_to_make("cpu-long") == "maskfed sweep --profile cpu-long && maskfed archive --profile cpu-long"
    table = archive.archive_table(found, notes)
    assert list(table.index) == ["paper profile (archived)", archive.column_name("cpu-paper"), archive.column_name("cpu-long")]
    assert list(table["runs"]) == [0, 0, 0] and list(table["status"]) == ["not archived"] * 3
    assert table.loc[archive.column_name("cpu-long"), "make with"] == archive.how_to_make("cpu-long")
    assert "damaged" not in table.columns  # a column empty for every profile is left out


def test_an_archived_column_names_a_model_that_is_not_the_papers():
    # a small-CNN profile's header says so (cpu-paper must not read as the paper's setting); the paper's model is
    # not named again, and the live profile's column is its bare name
    assert "small CNN" in archive.column_name("cpu-paper") and "small CNN" in archive.column_name("cpu-long")
    assert "small" not in archive.column_name("paper") and archive.column_name("cpu", archived=False) == "cpu"


def test_missing_runs_lists_the_profile_runs_not_archived(dirs_in_tmp):
    smoke = load_profile("smoke")
    cfgs = experiments.all_configs(smoke)
    for c in cfgs[:-1]:
        fake_run(dirs_in_tmp / "archive" / "smoke" / c.label(), c, recovery=2.0)
    assert list(archive.missing_frame("smoke")["run"]) == [cfgs[-1].label()]


@pytest.mark.slow
def test_cli_archive_refuses_until_every_run_has_finished(dirs_in_tmp, monkeypatch, capsys):
    cfgs = [make_run_config(**TINY), make_run_config(**{**TINY, "local_epochs": 2})]
    monkeypatch.setattr(cli.experiments, "all_configs", lambda profile: cfgs)  # a two-run "profile"
    runner.run(cfgs[0], progress=False)

    assert cli.main(["archive", "--profile", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "1 of the 2 runs" in err and cfgs[1].label() in err and "sweep --profile smoke" in err
    assert not (dirs_in_tmp / "archive").exists()

    runner.run(cfgs[1], progress=False)
    assert cli.main(["archive", "--profile", "smoke"]) == 0
    assert len(archive.load_archive("smoke")) == 2
    assert cli.main(["archive", "--profile", "laptop"]) == 2
    err = capsys.readouterr().err
    assert "profile" in err and "'laptop'" in err and "'smoke'" in err  # the name refused, the names allowed


def test_cli_archive_seeds_adds_only_those_seeds_runs(dirs_in_tmp, monkeypatch, capsys):
    # a one-run "profile" per seed; seed 0 archived earlier, seed 3 (added later) finished now
    monkeypatch.setattr(cli.experiments, "all_configs",
                        lambda profile: [make_run_config(**{**TINY, "seed": s}) for s in profile.seeds])
    first = make_run_config(**{**TINY, "seed": 0})
    fake_run(dirs_in_tmp / "archive" / "smoke" / first.label(), first, recovery=2.0)
    # seed 3 is not finished: refused, naming the sweep of that seed only
    assert cli.main(["archive", "--profile", "smoke", "--seeds", "3"]) == 2
    err = capsys.readouterr().err
    assert "1 of the 1 runs" in err and "sweep" in err and "--profile smoke --seeds 3`" in err
    later = make_run_config(**{**TINY, "seed": 3})
    fake_run(dirs_in_tmp / "runs" / later.label(), later, recovery=3.0)
    monkeypatch.setattr(cli.runner, "find_run", lambda c: runner.RunResult(c, dirs_in_tmp / "runs" / c.label(),
                                                                           pd.DataFrame(), {}) if c == later else None)
    assert cli.main(["archive", "--profile", "smoke", "--seeds", "3"]) == 0
    # seed 0's archived folder stays; seed 3's joins it
    assert sorted(r.config.seed for r in archive.load_archive("smoke")) == [0, 3]
    # bad input is refused before anything runs, naming the flag
    assert cli.main(["archive", "--profile", "smoke", "--seeds", "-1"]) == 2
    assert "--seeds -1" in capsys.readouterr().err
    assert cli.main(["archive", "--profile", "smoke", "--verify", "--seeds", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("--seeds") == 1 and "--verify" in err  # the flag refused, and with what


@pytest.mark.slow
def test_verify_relabels_only_when_every_rerun_metric_is_bit_identical(dirs_in_tmp, monkeypatch):
    # two tiny runs archived by "old" code; this checkout's code hash is another one
    cfgs = [make_run_config(**TINY), make_run_config(**{**TINY, "batch_size": "full"})]
    archive.archive_runs(runner.run_many(cfgs, workers=1, progress=False), "smoke")
    old = provenance.code_hash()
    monkeypatch.setattr(provenance, "code_hash", lambda: "feedfacefeedface")
    runs = archive.load_archive("smoke")
    assert archive.label(runs, "smoke").code_changed is True
    labels = [c.label() for c in cfgs]
    # the re-runs reproduce the archive (the code changed only in name)
    record = archive.verify_archive("smoke", labels=labels)
    # recorded, and the label now says the current code reproduces the runs
    assert record["identical"] is True and [r["identical"] for r in record["runs"]] == [True, True]
    assert record["code_hash"] == "feedfacefeedface" and record["archived_code_hashes"] == [old]
    assert record["within_tolerance"] is True and record["outcome"] == "bit-identical"
    assert [r["outcome"] for r in record["runs"]] == ["bit-identical"] * 2
    assert record["machine_id"] == provenance.machine_identity("cpu") and record["summary_rtol"] == archive.SUMMARY_RTOL
    lab = archive.label(runs, "smoke")
    assert lab.code_changed is False and lab.status == "bit-identical"
    assert [lab.record()[k] for k in ("re-run", "re-run here", "re-run other")] == [2, 2, 0]
    # another code hash is not covered by that check
    monkeypatch.setattr(provenance, "code_hash", lambda: "0000000000000000")
    assert archive.label(runs, "smoke").code_changed is True
    # a re-run that differs in one value (here: the archive altered in its last digit) relabels nothing
    monkeypatch.setattr(provenance, "code_hash", lambda: "1111111111111111")
    path = runs[0].path / "metrics.csv"
    m = pd.read_csv(path)
    m.loc[1, "recovery_unweighted"] = np.nextafter(m.loc[1, "recovery_unweighted"], np.inf)
    m.to_csv(path, index=False)
    archive.write_manifest(runs[0].path)  # as if another CPU had made it: its files agree with its manifest
    bad = archive.verify_archive("smoke", labels=labels)
    assert bad["identical"] is False and bad["runs"][0]["identical"] is False and bad["runs"][1]["identical"]
    assert 0 < bad["runs"][0]["max_abs_diff"] < 1e-12
    # that one-ulp difference leaves the summary cells within the tolerance: recorded per run and overall
    assert bad["runs"][0]["within_tolerance"] is True and bad["runs"][0]["summary_max_rel_diff"] <= archive.SUMMARY_RTOL
    assert bad["within_tolerance"] is True and bad["outcome"] == "within tolerance"
    lab = archive.label(archive.load_archive("smoke"), "smoke")
    assert lab.outcome == "within tolerance" and lab.verification["machine_id"]["id"] == bad["machine_id"]["id"]
    assert lab.status == "within tolerance" and bad["machine_id"]["id"] in lab.record()["verified on"]
    assert 0 < lab.record()["max rel. diff"] <= archive.SUMMARY_RTOL
    assert archive.label(archive.load_archive("smoke"), "smoke").code_changed is True
    assert len(json.loads((dirs_in_tmp / "archive" / "smoke" / archive.VERIFIED).read_text())) == 2
    with pytest.raises(ValueError, match=r"\['nope'\] .*smoke"):
        archive.verify_archive("smoke", labels=["nope"])


def test_same_metrics_ignores_wall_time_and_treats_nan_as_equal():
    a = pd.DataFrame({"round": [1, 2], "test_acc": [np.nan, 0.5], "wall_s": [1.0, 2.0]})
    assert archive.same_metrics(a, a.assign(wall_s=[9.0, 9.0])) == (True, 0.0)
    assert archive.same_metrics(a, a.assign(test_acc=[np.nan, 0.25])) == (False, 0.25)
    assert archive.same_metrics(a, a.drop(columns="test_acc"))[0] is False
    # first_difference: the first round, then column
    a = pd.DataFrame({"round": [1, 2, 3], "x": [1.0, 2.0, float("nan")], "y": [0.0, 5.0, 6.0], "wall_s": [1, 2, 3]})
    b = a.copy()
    assert archive.first_difference(a, b) is None
    b.loc[2, "x"] = 9.0          # round 3, column x
    b.loc[1, "y"] = 5.5          # round 2, column y: the first in round order
    b["wall_s"] = [7, 8, 9]      # timing is not a result
    assert archive.first_difference(a, b) == {"column": "y", "round": 2, "archived": 5.0, "rerun": 5.5}
    assert archive.first_difference(a, b.drop(columns="y"))["round"] is None


def test_default_sample_is_one_run_per_experiment(dirs_in_tmp):
    smoke = load_profile("smoke")
    for c in experiments.all_configs(smoke):
        fake_run(dirs_in_tmp / "archive" / "smoke" / c.label(), c, recovery=2.0)
    picked = archive.default_sample(archive.load_archive("smoke"), "smoke")
    kinds = {e: {c.label() for c in experiments.configs(smoke, e)} for e in smoke.experiments}
    assert len(picked) == 3
    assert all(any(r.config.label() in kinds[e] for r in picked) for e in smoke.experiments)


@pytest.mark.slow
def test_stage_study_from_archived_trajectories_is_archived_and_read_back(dirs_in_tmp):
    from maskfed.studies import stage

    # the smoke profile's ladder run, with θ snapshots, archived
    smoke = load_profile("smoke")
    ref = stage.ladder_config(smoke)
    keep = stage.ladder_snapshots(smoke, [ref])
    archive.archive_runs(runner.run_many([ref], progress=False, keep_every=keep), "smoke")
    assert archive.ladder_trajectories("smoke") == {0: dirs_in_tmp / "archive" / "smoke" / runner.identify(ref).path.name}
    dest = archive.archive_stage_study("smoke", workers=1, progress=False)
    back = archive.load_stage_study("smoke")
    # every protocol of both tables at every checkpoint of the one trajectory, read back as written
    assert sorted(p.name for p in dest.iterdir()) == sorted(archive.STAGE_FILES + (archive.MANIFEST,))
    n_stages = len(back.checkpoints)
    n_protocols = len(stage.study_configs(smoke)["table1"]) + len(stage.study_configs(smoke)["table2"])
    assert len(back.table) == n_stages * n_protocols and set(back.table["seed"]) == {0}
    assert back.spec == stage.make_spec("smoke")
    assert back.provenance["trajectories"] == {"0": archive.ladder_trajectories("smoke")[0].name}
    assert set(back.table["batch_size"]) == {"16", "64", "full"}  # read as text, like the live table
    # a damaged study is skipped with a warning; no study at all is None
    (dest / "spec.json").unlink()
    with pytest.warns(UserWarning, match="malformed stage study"):
        assert archive.load_stage_study("smoke") is None
    assert archive.load_stage_study("cpu-long") is None


@pytest.mark.slow
def test_a_damaged_archived_run_is_shown_as_damaged_not_as_never_archived(dirs_in_tmp, capsys):
    # the cpu-long Table II runs archived, one of them with its metrics cut to 3 rows
    long = load_profile("cpu-long")
    cfgs = experiments.configs(long, "table2")
    root = dirs_in_tmp / "archive" / "cpu-long"
    folders = [fake_run(root / f"{c.label()}-0123456789abcdef", c, recovery=2.0) for c in cfgs]
    pd.read_csv(folders[0] / "metrics.csv").head(3).to_csv(folders[0] / "metrics.csv", index=False)
    with pytest.warns(UserWarning, match="skipping malformed"):
        found, notes = archive.summaries("table2", profiles=["cpu-long"])
    from maskfed.book import notebooks
    notebooks.report_damaged_archive()  # what the build's output says
    # named as damaged with its reason, on the page and in the build's output; not "not yet archived"
    (a,) = found
    assert a.missing == [] and [d.folder for d in a.damaged] == [folders[0]]
    row = archive.archive_table(found, notes).loc[archive.column_name("cpu-long")]
    damaged = row["damaged"]  # the folder, the file, the rows it has and the rounds the run needs
    assert damaged.startswith(f"{folders[0].name} (") and "metrics.csv" in damaged and " 3 rows" in damaged \
        and "100-round" in damaged
    assert row["make with"] == archive.how_to_make("cpu-long")
    assert "missing" not in row.index  # nothing "not yet archived"
    err = capsys.readouterr().err
    assert f" {folders[0]} " in err and "damaged" in err and "metrics.csv" in err and " 3 rows" in err and "100-round" in err
    # every run of the experiment damaged: the note says so instead of "no archived run exists"
    for f in folders[1:]:
        (f / "provenance.json").write_text("{cut")
    with pytest.warns(UserWarning):
        found, notes = archive.summaries("table2", profiles=["cpu-long"])
    assert found == [] and [(n.profile, n.status) for n in notes] == [("cpu-long", "damaged")]
    assert len(notes[0].damaged) == 3 and any("provenance.json" in d.reason for d in notes[0].damaged)
    assert archive.archive_table(found, notes).loc[archive.column_name("cpu-long"), "status"] == "damaged"


def test_the_studies_folders_beside_the_runs_are_not_run_folders(dirs_in_tmp):
    # one archived run beside a stage study and a model-size study folder (no run files)
    long = load_profile("cpu-long")
    cfg = experiments.configs(long, "table2")[0]
    root = dirs_in_tmp / "archive" / "cpu-long"
    fake_run(root / f"{cfg.label()}-0123456789abcdef", cfg, recovery=2.0)
    for study in (archive.STAGE_DIR, "factor-models", "factor-resnet"):
        (root / study).mkdir()
        (root / study / "table.csv").write_text("a\n1\n")
    # one run, nothing damaged
    assert len(archive.load_archive("cpu-long")) == 1
    assert archive.damaged_folders("cpu-long") == []


# --------------------------------------------------------------------------- manifests: labels say what is on disk

def _two_archived_runs(monkeypatch):
    """Two tiny runs archived by "old" code, this checkout's code hash another one (a code change)."""
    cfgs = [make_run_config(**TINY), make_run_config(**{**TINY, "batch_size": "full"})]
    archive.archive_runs(runner.run_many(cfgs, workers=1, progress=False), "smoke")
    monkeypatch.setattr(provenance, "code_hash", lambda: "feedfacefeedface")
    return cfgs, archive.load_archive("smoke")


@pytest.mark.slow
def test_runs_added_with_this_code_need_a_verification_that_covers_them(dirs_in_tmp, monkeypatch):
    # two runs of old code verified with this checkout's code, then a seed added with this code
    cfgs, runs = _two_archived_runs(monkeypatch)
    assert archive.verify_archive("smoke", labels=[c.label() for c in cfgs])["identical"] is True
    added = make_run_config(**{**TINY, "seed": 1})
    archive.archive_runs(runner.run_many([added], workers=1, progress=False), "smoke")
    runs = archive.load_archive("smoke")
    assert sorted(r.provenance["code_hash"] for r in runs).count("feedfacefeedface") == 1
    added_folder = next(r.path.name for r in runs if r.provenance["code_hash"] == "feedfacefeedface")
    # the verification holds no digest of the added run, so it covers the archive no longer
    lab = archive.label(runs, "smoke")
    assert lab.verified is False and lab.code_changed is True and lab.unverified == [added_folder]
    assert lab.status == "code changed" and lab.record()["unverified"] == added_folder
    # verified again, the record covering every run's files
    record = archive.verify_archive("smoke", labels=[c.label() for c in cfgs])
    assert sorted(record["contents"]) == sorted(r.path.name for r in runs)
    lab = archive.label(runs, "smoke")
    # the text says which runs are which
    assert lab.verified is True and lab.code_changed is False and lab.same_code_runs == 1 and lab.unverified == []
    assert lab.status == "bit-identical" and (lab.runs, lab.same_code_runs) == (3, 1)
    assert [lab.record()[k] for k in ("re-run", "re-run here", "re-run other")] == [2, 2, 0]
    # a label of a subset counts the re-run runs among its own runs apart from those of the rest of the archive
    sub = archive.label([r for r in runs if r.config.label() != cfgs[1].label()], "smoke").record()
    assert [sub[k] for k in ("re-run", "re-run here", "re-run other")] == [2, 1, 1]
    # an older run edited after the check: the verification no longer covers these bytes
    path = runs[0].path if runs[0].provenance["code_hash"] != "feedfacefeedface" else runs[1].path
    m = pd.read_csv(path / "metrics.csv")
    m.loc[0, "test_loss"] = 1.0
    m.to_csv(path / "metrics.csv", index=False)
    archive.write_manifest(path)  # even re-manifested, its content digest differs from the checked one
    assert archive.label(archive.load_archive("smoke"), "smoke").verification is None


@pytest.mark.slow
def test_an_edited_archived_file_is_named_by_the_label_and_never_called_reproduced(dirs_in_tmp, monkeypatch):
    # a passed verification, then one value of one archived metrics.csv changed by 1e-3
    cfgs, runs = _two_archived_runs(monkeypatch)
    labels = [c.label() for c in cfgs]
    assert archive.verify_archive("smoke", labels=labels)["identical"] is True
    assert archive.label(runs, "smoke").status == "bit-identical"
    path = runs[0].path / "metrics.csv"
    clean = path.read_bytes()
    m = pd.read_csv(path)
    m.loc[1, "recovery_unweighted"] += 1e-3
    m.to_csv(path, index=False)
    # the label is computed from the files on disk, before any check runs
    lab = archive.label(archive.load_archive("smoke"), "smoke")
    # which run and which file, and no "bit-identical"
    assert lab.changed == [f"{runs[0].path.name}: metrics.csv changed"]
    assert lab.code_changed is True and lab.verified is False
    assert lab.status == "files changed" and lab.record()["changed"] == lab.changed[0]
    # --verify fails naming the run, the column and the round; the label keeps saying "changed"
    assert cli.main(["archive", "--profile", "smoke", "--verify", "--runs", *labels]) == 1
    bad = json.loads((dirs_in_tmp / "archive" / "smoke" / archive.VERIFIED).read_text())[-1]
    first = next(r for r in bad["runs"] if r["folder"] == runs[0].path.name)
    assert first["first_difference"]["column"] == "recovery_unweighted" and first["first_difference"]["round"] == 2
    assert first["changed_files"] == ["metrics.csv changed"]
    assert archive.label(archive.load_archive("smoke"), "smoke").status == "files changed"
    # restored from git (the same bytes): the newest record is the failure, on other files, so the older
    # pass on these exact files counts again
    path.write_bytes(clean)
    lab = archive.label(archive.load_archive("smoke"), "smoke")
    assert lab.changed == [] and lab.verified is True and lab.status == "bit-identical"


def test_a_newer_failed_verification_is_shown_not_shadowed_by_an_older_pass(dirs_in_tmp, monkeypatch):
    cfgs, runs = _two_archived_runs(monkeypatch)
    ok = archive.verify_archive("smoke", labels=[c.label() for c in cfgs])
    assert ok["identical"] is True
    # a later check of the same code on the same files failed (another machine, say): recorded by hand
    failed = {**ok, "utc": "2099-01-01T00:00:00+00:00", "identical": False, "machine": "cpu (Other CPU)",
              "runs": [{**ok["runs"][0], "identical": False, "max_abs_diff": 0.5,
                        "first_difference": {"column": "test_acc", "round": 3, "archived": 0.25, "rerun": 0.75}}]}
    path = dirs_in_tmp / "archive" / "smoke" / archive.VERIFIED
    path.write_text(json.dumps(json.loads(path.read_text()) + [failed]))
    lab = archive.label(runs, "smoke")
    assert lab.verified is False and lab.code_changed is True
    assert lab.status == "within tolerance" and lab.record()["verified on"].startswith("cpu (Other CPU")  # summary cells agreed
    first = lab.record()["first difference"]  # the run, the column, the round, the archived value, the gap
    assert first.startswith(f"{ok['runs'][0]['label']}: test_acc,") and "round 3," in first and " 0.25," in first \
        and first.endswith(" 2.0e+00")
    # the runs' own code failing on that machine too says the difference is not the code's
    own = {**failed, "code_hash": runs[0].provenance["code_hash"], "utc": "2099-01-02T00:00:00+00:00"}
    path.write_text(json.dumps(json.loads(path.read_text()) + [own]))
    assert archive.label(runs, "smoke").record()["own code"] == "within tolerance"  # not bit-identical either
    # made on another machine, the own-code check names it: bit-identical there says nothing of this machine
    path.write_text(json.dumps(json.loads(path.read_text()) + [{**ok, "code_hash": own["code_hash"],
                                                                "utc": "2099-01-03T00:00:00+00:00"}]))
    assert archive.label(runs, "smoke").record()["own code"] == f"bit-identical on {ok['machine']}"
    # an older record without content digests (made before they existed) never counts
    path.write_text(json.dumps([{k: v for k, v in ok.items() if k != "contents"}]))
    assert archive.label(runs, "smoke").verification is None


def test_manifest_changes_names_changed_missing_and_extra_files(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "a.csv").write_text("1\n")
    (folder / "b.json").write_text("{}")
    digest = archive.write_manifest(folder)
    assert archive.manifest_changes(folder) == [] and archive.manifest_digest(folder) == digest
    assert json.loads((folder / archive.MANIFEST).read_text())["files"]["a.csv"] == (
        "4355a46b19d348dc2f57c046f8ef63d4538ebb936000f3c9ee954a27460dd865")  # sha256 of b"1\n"
    (folder / "a.csv").write_text("2\n")
    (folder / "b.json").unlink()
    (folder / "c.txt").write_text("x")
    assert archive.manifest_changes(folder) == ["a.csv changed", "b.json missing", "c.txt extra"]
    (folder / archive.MANIFEST).unlink()
    assert archive.manifest_changes(folder) == ["no manifest.json"] and archive.manifest_digest(folder) is None


def test_add_manifests_writes_only_missing_ones(dirs_in_tmp, capsys):
    root = dirs_in_tmp / "archive" / "smoke"
    cfg = make_run_config(**TINY)
    a = fake_run(root / "a", cfg, recovery=2.0)
    b = fake_run(root / "b", cfg.model_copy(update={"seed": 1}), recovery=2.0)
    (b / archive.MANIFEST).unlink()
    before = (a / archive.MANIFEST).read_bytes()
    assert archive.add_manifests("smoke") == [b]
    assert (a / archive.MANIFEST).read_bytes() == before and archive.manifest_changes(b) == []
    # the command
    (a / archive.MANIFEST).unlink()
    assert cli.main(["archive", "--profile", "smoke", "--manifests"]) == 0
    assert "into 1 folder(s)" in capsys.readouterr().err and archive.manifest_changes(a) == []
    assert cli.main(["archive", "--profile", "smoke", "--manifests"]) == 0
    assert "into 0 folder(s)" in capsys.readouterr().err
    assert cli.main(["archive", "--profile", "smoke", "--manifests", "--verify"]) == 2


def test_replacing_an_archived_run_killed_between_the_renames_loses_nothing(dirs_in_tmp, monkeypatch):
    # one archived run; then archive it again, killed after the old folder was moved aside
    cfg = make_run_config(**TINY)
    results = runner.run_many([cfg], workers=1, progress=False)
    dest = archive.archive_runs(results, "smoke")[0]
    real, calls = archive.os.replace, []

    def killed(src, dst):
        calls.append(dst)
        if len(calls) == 3:  # manifest, old folder aside, new folder in: die before the last
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(archive.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        archive.archive_runs(results, "smoke")
    monkeypatch.setattr(archive.os, "replace", real)
    root = dest.parent
    assert not dest.exists()
    assert sorted(p.name[:5] for p in root.iterdir()) == [".old-", ".tmp-"]
    # the pid of the leftovers is this live process's: pretend it died, as a killed command does
    for p in list(root.iterdir()):
        p.rename(root / (p.name.rpartition("-")[0] + "-999999999"))
    # the next archive command tidies up first
    done = archive.clean_leftovers(root)
    # the old run is back whole, nothing hidden is left, and the book reads it
    assert sorted(done) == [f"removed .tmp-{dest.name}-999999999", f"restored {dest.name}"]
    assert [p.name for p in root.iterdir()] == [dest.name] and archive.manifest_changes(dest) == []
    assert [r.path for r in archive.load_archive("smoke")] == [dest]
    archive.archive_runs(results, "smoke")
    assert [p.name for p in root.iterdir()] == [dest.name]


@pytest.mark.slow
def test_alpha_cross_reruns_the_table_two_runs_with_snapshots_and_measures_every_alpha_at_every_theta(dirs_in_tmp):
    from maskfed.studies import stage

    # the smoke ladder run with θ snapshots and Table II's other α runs without, all archived
    smoke = load_profile("smoke")
    ref = stage.ladder_config(smoke)
    others = [stage.ladder_config(smoke, alpha=a) for a in smoke.table2.alphas if a != smoke.table1.alpha]
    archive.archive_runs(runner.run_many([ref], progress=False, keep_every=stage.ladder_snapshots(smoke, [ref])), "smoke")
    archive.archive_runs(runner.run_many(others, progress=False), "smoke")
    shutil.rmtree(dirs_in_tmp / "results" / "runs")  # the reruns must train again
    dest = archive.archive_alpha_cross("smoke", workers=1, progress=False)
    back = archive.load_alpha_cross("smoke")
    # each rerun reproduced its archived run on this machine, so its θ joined the archived folder;
    # the ladder run kept its θ as it trained
    rep = back.provenance["reproduction"]
    ref_name = runner.identify(ref).path.name
    assert len(rep) == 1 + len(others) and rep[ref_name] == "kept"
    assert all(v == "rerun identical" for k, v in rep.items() if k != ref_name)
    for c in others:
        folder = dirs_in_tmp / "archive" / "smoke" / runner.identify(c).path.name
        assert (folder / runner.THETAS).is_file() and archive.manifest_changes(folder) == []
    # every α measured at θ of every α's trajectory, at each of its checkpoints, Table II's protocol only
    assert sorted(p.name for p in dest.iterdir()) == sorted(archive.CROSS_FILES + (archive.MANIFEST,))
    assert set(back.table["experiment"]) == {"table2"}
    for a in smoke.table2.alphas:
        rows = back.table[back.table["trajectory_alpha"] == a]
        n_ck = int((back.checkpoints["trajectory_alpha"] == a).sum())
        assert len(rows) == n_ck * len(smoke.table2.alphas) and set(rows["alpha"]) == set(smoke.table2.alphas)
    ratios = stage.cross_ratios(back.table)
    assert set(ratios.index.get_level_values("trajectory_alpha")) == set(smoke.table2.alphas)
    assert archive.load_alpha_cross("cpu-long") is None
    # the cross made again (seeds added later, say): the reruns' reproduction record is carried forward, not
    # replaced by "kept" now that their folders hold θ
    archive.archive_alpha_cross("smoke", workers=1, progress=False)
    assert archive.load_alpha_cross("smoke").provenance["reproduction"] == rep
    # the cross's folder is a study, not a run: reading the archive's runs passes it over without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(archive.load_archive("smoke")) == 1 + len(others)


# --------------------------------------------------------------------------- issue 42: missing runs, tamper, tolerance

def _full_archive(root, profile_name):
    """Every run of a profile archived by hand (this checkout's code hash); {label: folder}."""
    prof = load_profile(profile_name)
    return {c.label(): fake_run(root / f"{c.label()}-0123456789abcdef", c, recovery=2.0)
            for c in experiments.all_configs(prof)}


def test_a_run_moved_out_of_the_archive_stops_the_book_naming_it_and_the_sweep_command(dirs_in_tmp, capsys):
    # the whole cpu-paper archive (5 seeds), then one seed-3 run moved out of it
    root = dirs_in_tmp / "archive" / "cpu-paper"
    folders = _full_archive(root, "cpu-paper")
    assert len(archive.require_complete("cpu-paper")) == len(folders)
    label = next(k for k in folders if k.endswith("-s3") and "bs128-t1" in k)
    shutil.move(folders[label], dirs_in_tmp / "moved")
    with pytest.raises(archive.IncompleteArchive) as caught:
        archive.require_complete("cpu-paper")
    from maskfed.book import evidence, notebooks
    code = notebooks.main(["--profile", "cpu", "--out-dir", str(dirs_in_tmp / "nb"), "verdict"])
    err = capsys.readouterr().err
    # the missing run and its seed are data; the message names them and the command that restores them
    exc = caught.value
    assert list(exc.missing["run"]) == [label] and exc.seeds == [3] and exc.profile == "cpu-paper"
    assert exc.total == len(folders)
    assert label in str(exc) and "sweep" in str(exc) and "--profile cpu-paper --seeds 3" in str(exc)
    assert list(archive.missing_frame("cpu-paper")["reason"]) == ["not archived"]
    for read in (lambda: evidence.archived_evidence("cpu-paper"), lambda: evidence.source_runs("cpu-paper"),
                 lambda: archive.summaries("table1", profiles=["cpu-paper"], whole=True)):
        with pytest.raises(archive.IncompleteArchive, match=label):
            read()
    found, _ = archive.summaries("table1", profiles=["cpu-paper"])  # the data API still reads a partial archive
    assert found[0].missing == [label]
    # the build stops before any chapter runs: one error line, exit status 2, nothing written
    assert code == 2 and err.count("error:") == 1 and label in err and "--seeds 3" in err
    assert not (dirs_in_tmp / "nb" / "verdict.ipynb").exists()
    # a damaged folder counts as missing, named with its reason
    shutil.move(dirs_in_tmp / "moved", folders[label])
    pd.read_csv(folders[label] / "metrics.csv").head(3).to_csv(folders[label] / "metrics.csv", index=False)
    with pytest.warns(UserWarning), pytest.raises(archive.IncompleteArchive) as caught:
        archive.require_complete("cpu-paper")
    assert list(caught.value.missing["folder"]) == [folders[label].name] and "3 rows" in str(caught.value)


def _verification_record(results, **extra):
    """A passed verification of this checkout's code written by hand, covering the given runs' files as they are."""
    return {"code_hash": provenance.code_hash(), "commit": "b" * 10, "torch_threads": 1, "utc": "2026-12-06T00:00:00+00:00",
            "machine": "cpu (Intel(R) Xeon(R) Processor)", "archived_code_hashes": [], "identical": True,
            "runs": [{"label": r.config.label(), "folder": r.path.name, "identical": True, "max_abs_diff": 0.0,
                      "first_difference": None, "changed_files": []} for r in results[:1]],
            "contents": {r.path.name: archive.content_digest(r.path) for r in results}, **extra}


def test_a_run_of_this_code_edited_with_its_manifest_is_never_called_reproduced(dirs_in_tmp):
    # one run of older code, one of this checkout's; a passed check of this code covering both
    root = dirs_in_tmp / "archive" / "smoke"
    cfg = make_run_config(**TINY)
    fake_run(root / "older", cfg, recovery=2.0, code_hash="0123456789abcdef")
    fake_run(root / "ours", cfg.model_copy(update={"seed": 1}), recovery=2.0)
    runs = archive.load_archive("smoke")
    (root / archive.VERIFIED).write_text(json.dumps([_verification_record(runs)]))
    lab = archive.label(runs, "smoke")
    assert lab.verified is True and lab.outcome == "bit-identical" and lab.unverified == []
    assert lab.status == "bit-identical"
    # this code's run edited consistently, its manifest rewritten to match
    m = pd.read_csv(root / "ours" / "metrics.csv")
    m.loc[0, "recovery_unweighted"] = 2.5
    m.to_csv(root / "ours" / "metrics.csv", index=False)
    archive.write_manifest(root / "ours")
    lab = archive.label(archive.load_archive("smoke"), "smoke")
    # the manifest agrees, but the verification no longer covers that run: not reproduced, and named
    assert lab.changed == [] and lab.verification is None and lab.verified is False and lab.outcome is None
    assert lab.unverified == ["ours"] and lab.code_changed is True
    assert lab.status == "code changed" and lab.record()["unverified"] == "ours"
    # a record of the older format without a digest of this code's run does not cover it either
    (root / archive.VERIFIED).write_text(json.dumps([{**_verification_record(runs), "contents": {
        "older": archive.content_digest(root / "older")}}]))
    lab = archive.label(archive.load_archive("smoke"), "smoke")
    assert lab.verified is False and lab.unverified == ["ours"] and lab.status == "code changed"


def test_summary_cells_within_tolerance_when_metrics_differ_in_the_last_digits():
    # 8 rounds, the last quarter (rounds 7-8) summarised; a copy 1e-9 off, another 1e-3 off
    m = pd.DataFrame({"round": range(1, 9), "recovery_unweighted": [3.0, 0.5, 2, 2, 2, 2, 4.0, 6.0],
                      "recovery_weighted": 2.0, "mu2_hat": 1.0, "sigma2_hat": 2.0, "test_acc": 0.5,
                      "T_mean": 4.0, "train_loss": 1.0})
    near, far = m.copy(), m.copy()
    near["recovery_unweighted"] *= 1 + 1e-9
    far.loc[7, "recovery_unweighted"] *= 1 + 1e-3
    cells = archive.summary_cells(m)
    a, b = archive.compare_summaries(m, near), archive.compare_summaries(m, far)
    # the cells' values, and which comparison holds
    assert cells == {"recovery_unweighted": 5.0, "recovery_weighted": 2.0, "sigma2_hat": 2.0, "mu2_hat": 1.0,
                     "test_acc": 0.5, "share_below_one": 1 / 8}
    assert archive.same_metrics(m, near)[0] is False
    assert a["within_tolerance"] is True and 0 < a["max_rel_diff"] < archive.SUMMARY_RTOL
    assert a["worst"] == "recovery_unweighted"
    assert b["within_tolerance"] is False and b["worst"] == "recovery_unweighted" and b["max_rel_diff"] > 1e-4
    blank = m.assign(test_acc=np.nan)  # NaN agrees with NaN only
    assert archive.compare_summaries(blank, blank)["max_rel_diff"] == 0.0
    assert archive.compare_summaries(m, blank)["max_rel_diff"] == np.inf and archive.compare_summaries(m, blank)["worst"] == "test_acc"
    assert archive.verification_outcome({"identical": True}) == "bit-identical"
    assert archive.verification_outcome({"identical": False, "within_tolerance": True}) == "within tolerance"
    assert archive.verification_outcome({"identical": False}) == "not reproduced"


def test_label_says_within_tolerance_and_on_which_machine_identity(dirs_in_tmp):
    root = dirs_in_tmp / "archive" / "smoke"
    fake_run(root / "older", make_run_config(**TINY), recovery=2.0, code_hash="0123456789abcdef")
    runs = archive.load_archive("smoke")
    ident = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_flags": "aaaaaaaaaaaa", "cpu_capability": "AVX2",
             "torch": "2.14.1", "torch_config": "cccccccccccc", "id": "0123456789ab"}
    rec = _verification_record(runs, identical=False, within_tolerance=True, machine_id=ident, summary_rtol=1e-6)
    rec["runs"][0] |= {"identical": False, "max_abs_diff": 1e-8, "first_difference": {
        "column": "recovery_unweighted", "round": 1, "archived": 2.319069658, "rerun": 2.319069646}}
    (root / archive.VERIFIED).write_text(json.dumps([rec]))
    lab = archive.label(runs, "smoke")
    assert lab.outcome == "within tolerance" and lab.verified is False and lab.verification["machine_id"]["id"] == "0123456789ab"
    assert lab.status == "within tolerance"
    where = lab.record()["verified on"]  # the device, the processor, its vector unit, torch and the machine's id
    assert where.startswith("cpu (") and "Xeon(R)" in where
    assert "AVX2" in where and "torch 2.14.1" in where and where.endswith(" 0123456789ab)")


def test_label_of_a_verification_where_neither_held_gives_the_summary_differences(dirs_in_tmp):
    # a re-run whose 1/Δ_S summary differs by 2 % (1.64 -> 1.6072) and whose share below 1 by 1/6
    root = dirs_in_tmp / "archive" / "smoke"
    fake_run(root / "older", make_run_config(**TINY), recovery=2.0, code_hash="0123456789abcdef")
    runs = archive.load_archive("smoke")
    rec = _verification_record(runs, identical=False, within_tolerance=False, summary_rtol=1e-6)
    rec["runs"][0] |= {"identical": False, "max_abs_diff": 0.97, "summary_max_rel_diff": 1 / 6,
                       "summary_archived": {"recovery_unweighted": 1.64}, "summary_rerun": {"recovery_unweighted": 1.6072},
                       "first_difference": {"column": "train_loss", "round": 1, "archived": 2.3190696582902626,
                                            "rerun": 2.319069657676738}}
    (root / archive.VERIFIED).write_text(json.dumps([rec]))
    lab = archive.label(runs, "smoke")
    rec = lab.record()
    # the outcome, both relative differences of the summaries (1/6; |1.6072/1.64 - 1| = 0.02), and the
    # first difference as a relative gap (2.3190696582902626 against 2.319069657676738: 2.6e-10)
    assert lab.outcome == "not reproduced" and lab.verified is False and lab.status == "not reproduced"
    assert rec["max rel. diff"] == 0.167 and rec["1/Δ_S rel. diff"] == 0.02  # 1/6 and 0.02 to 3 significant digits
    first = rec["first difference"]
    assert "train_loss," in first and "round 1," in first and " 2.319," in first and first.endswith(" 2.6e-10")
