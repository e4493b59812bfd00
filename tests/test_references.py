"""TVM's own schedules as reference rows, without a GPU: dlight builds, the committed MetaSchedule
database replays for every size it holds, and the plumbing says why a row is missing."""

import pytest

import schedules
from schedules.integration import references as tvm_refs
from steps.measure import metaschedule, references

H100 = "NVIDIA H100 80GB HBM3"
H100_DB = references.metaschedule_dir(H100)


def test_dlight_schedules_the_matmul_for_the_arch():
    source = schedules.cuda_source(tvm_refs.build_dlight(512, 512, 512, "sm_90"))
    assert 'extern "C" __global__' in source and "__shared__" in source  # dlight stages through shared memory


def test_the_committed_h100_database_replays_every_ladder_size():
    assert tvm_refs.tuned_sizes(H100_DB) == [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]
    for size in tvm_refs.tuned_sizes(H100_DB):
        source = schedules.cuda_source(tvm_refs.build_metaschedule(*size, "sm_90", str(H100_DB)))
        assert 'extern "C" __global__' in source
    info = references.metaschedule_info(H100)
    assert info["trials"] == 128 and info["cost_model"] == "xgb"
    assert references.label(references.METASCHEDULE, H100) == "TVM MetaSchedule (128 trials)"


def test_an_untuned_size_or_gpu_has_no_row_and_says_why():
    why = references.available(references.METASCHEDULE, (1000, 1500, 700), H100)
    assert "not tuned for nvidia-h100-80gb-hbm3 at 1000x1500x700" in why and "--tune" in why
    assert references.available(references.METASCHEDULE, (512, 512, 512), "NVIDIA Fake G100") is not None
    assert references.available(references.DLIGHT, (1000, 1500, 700), H100) is None
    with pytest.raises(schedules.ConfigError, match="no MetaSchedule record for 1000x1500x700"):
        tvm_refs.build_metaschedule(1000, 1500, 700, "sm_90", str(H100_DB))


def test_the_committed_records_replay_on_workloads_made_again():
    # the workloads are not stored: each is the base matmul again, and must match what was tuned
    # (its trace replays on it: the tuned kernel's thread bindings, its shared-memory copies)
    db = tvm_refs._database(H100_DB)
    for size in tvm_refs.tuned_sizes(H100_DB):
        assert db.has_workload(tvm_refs.workload(*size))
        text = tvm_refs.metaschedule_schedule(*size, H100_DB).mod.script()
        assert 'thread="blockIdx.x"' in text and '"shared"' in text


def test_rewriting_a_database_keeps_one_record_per_size(tmp_path):
    records = metaschedule.existing_records(H100_DB)
    assert sorted(records) == [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]
    metaschedule.write_database(tmp_path / "db", {(512, 512, 512): records[(512, 512, 512)]}, "sm_90")
    assert tvm_refs.tuned_sizes(tmp_path / "db") == [(512, 512, 512)]
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == ["database_tuning_record.json", "workloads.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["db"]  # no temporary folder left beside it


@pytest.mark.parametrize("text, keys", [("all", ["cublas", "cublas_tf32", "dlight", "metaschedule"]),
                                        ("dlight,cublas", ["cublas", "dlight"])])
def test_parse_keys(text, keys):
    assert [r.key for r in references.parse_keys(text)] == keys


def test_parse_keys_rejects_unknown():
    with pytest.raises(ValueError, match="unknown reference 'cudnn'"):
        references.parse_keys("cublas,cudnn")


def test_tune_without_its_packages_is_one_line(monkeypatch, capsys):
    from steps.commands import cublas
    from steps.measure import harness

    monkeypatch.setattr(metaschedule, "missing_packages", lambda: ["cloudpickle"])
    monkeypatch.setattr(harness, "gpu_present", lambda: True)
    assert cublas.main(["--tune", "--sizes", "512"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tune needs cloudpickle" in err[0] and ".[tune]" in err[0]


def test_trials_without_tune_is_one_line(capsys):
    from steps.commands import cublas

    assert cublas.main(["--trials", "8"]) == 2
    assert capsys.readouterr().err.strip() == "python -m steps.cublas: error: --trials is for --tune"
