"""The files between processes (``hvdflow_wire``): each written and read back the same, and each malformed one
named (file, line, key) instead of read as data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hvdflow.errors import LaunchError
from hvdflow.files.atomic import write_json_atomic
from hvdflow.files.private import UnsafePlace
from hvdflow.pipeline.stages import collect_rank_results
from hvdflow.slurm.launch import first_failed_rank
from hvdflow.slurm.rank_task import rank_environment
from hvdflow.slurm.staging import read_reports
from hvdflow_index import write_json
from hvdflow_wire import WireError
from hvdflow_wire.benchmark import BenchmarkResult
from hvdflow_wire.elastic import (
    DriverResult,
    EpochEnd,
    Event,
    EventAppender,
    EventReader,
    ExitAppender,
    ExitReader,
    Hosts,
    Membership,
    MembershipAppender,
    MembershipReader,
    RequestAppender,
    RequestReader,
    Slot,
    StartWorker,
    StopWorker,
    WorkerExit,
    WorkerResult,
)
from hvdflow_wire.lines import LineAppender, LineReader
from hvdflow_wire.metrics import TrainingMetrics
from hvdflow_wire.model_check import ModelCheck
from hvdflow_wire.rank import RankResult
from hvdflow_wire.slurm import RankFailed, RankStopped, Rendezvous
from hvdflow_wire.staging import StagingReport
from hvdflow_wire.task import NvidiaSetup, TaskFile
from rank_results import rank_result, rank_result_json
from test_slurm_env import staging_report_json

SLOT = Slot(hostname="n1", rank=1, size=2, local_rank=0, local_size=1, cross_rank=1, cross_size=2)


def test_a_rank_result_is_written_byte_for_byte_as_the_trainer_wrote_its_dict(tmp_path: Path) -> None:
    data = rank_result_json(1, topology="ring", elastic_worker="3", cuda_visible_devices="0", first_step_unix=None)
    write_json(str(tmp_path / "before.json"), data)  # how train.py wrote the result before it was a value
    result = RankResult.from_json(data, "rank 1")
    result.write(str(tmp_path / "rank-1.json"))
    assert (tmp_path / "rank-1.json").read_bytes() == (tmp_path / "before.json").read_bytes()
    assert RankResult.read(str(tmp_path / "rank-1.json")) == result
    assert result.to_json() == data and (result.elastic_worker, result.size) == ("3", 2)


@pytest.mark.parametrize(("change", "message"), [
    ({"epochs_done": "10"}, "epochs_done is str, expected int"),
    ({"epochs_done": True}, "epochs_done is bool, expected int"),
    ({"cpus": [0, "1"]}, "cpus[1] is str, expected int"),
    ({"resumed_from": {"epoch": 1, "step": None}}, 'resumed_from["step"] is null, expected int'),
    ({"hostname": None}, "hostname is null, expected str"),
    ({"weights": "x"}, "unknown weights"),
    ({"local_rank": 2}, "local rank 2 outside 0..1"),  # the placement's own check (hvdflow_wire.placement)
])
def test_a_malformed_rank_result_is_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(rank_result_json(0, **change)))
    with pytest.raises(WireError) as error:
        RankResult.read(str(path))
    assert str(error.value) == f"{path}: {message}"


def test_a_rank_result_without_keys_or_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.json"
    data = rank_result_json(0)
    del data["python"], data["size"]
    path.write_text(json.dumps(data))
    with pytest.raises(WireError, match=f"^{re.escape(str(path))}: missing python, size$"):
        RankResult.read(str(path))
    path.write_text('{"rank": 0')
    with pytest.raises(WireError, match=f"^{re.escape(str(path))} is not valid JSON"):
        RankResult.read(str(path))
    path.write_text("[]")
    with pytest.raises(WireError, match=f"^{re.escape(str(path))} is list, expected an object$"):
        RankResult.read(str(path))


def test_the_pipeline_names_a_malformed_rank_result(tmp_path: Path) -> None:
    rank_result(0).write(str(tmp_path / "rank-0.json"))
    (tmp_path / "rank-1.json").write_text(json.dumps(rank_result_json(1, epochs_done=None)))
    with pytest.raises(LaunchError) as error:
        collect_rank_results(tmp_path, 2, 10)
    assert str(error.value) == f"a malformed rank result: {tmp_path / 'rank-1.json'}: epochs_done is null, expected int"
    rank_result(1).write(str(tmp_path / "rank-1.json"))
    assert collect_rank_results(tmp_path, 2, 10) == [rank_result(0), rank_result(1)]


@pytest.mark.parametrize("task", [
    TaskFile(argv=["udocker", "run", "c"], logs="/l", launcher="mpi", network_interface="auto", max_ranks_per_node=2,
             nvidia=NvidiaSetup("/u", ["c", "c-r1"]), result="/o/rank-{rank}.json", rendezvous="/l/rendezvous.json"),
    TaskFile(argv=["python3"], logs="/l", launcher="gloo", network_interface="lo", max_ranks_per_node=1, nvidia=None,
             log="/l/worker-3.log", elastic=True),
], ids=["fixed", "elastic"])
def test_a_task_file_is_read_back_as_written(tmp_path: Path, task: TaskFile) -> None:
    task.write(str(tmp_path / "task.json"))
    assert TaskFile.read(str(tmp_path / "task.json")) == task


def test_a_malformed_task_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "task.json"
    TaskFile(argv=["a"], logs="/l", launcher="gloo", network_interface="lo", max_ranks_per_node=1, nvidia=None,
             log="/l/w.log", elastic=True).write(str(path))
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "nvidia": {"udocker_dir": "/u"}}))
    with pytest.raises(WireError, match=f"^{re.escape(str(path))}: nvidia: missing containers$"):
        TaskFile.read(str(path))
    path.write_text(json.dumps({**data, "log": None}))
    with pytest.raises(WireError, match=f"^{re.escape(str(path))}: an elastic worker's task names no log$"):
        TaskFile.read(str(path))
    with pytest.raises(WireError, match="a fixed run's task names no result or no rendezvous file"):
        TaskFile(argv=["a"], logs="/l", launcher="gloo", network_interface="lo", max_ranks_per_node=1, nvidia=None)


@pytest.mark.parametrize(("appender", "reader", "records"), [
    (RequestAppender, RequestReader, [StartWorker(0, SLOT, {"HOROVOD_RANK": "1"}), StopWorker(0)]),
    (ExitAppender, ExitReader, [WorkerExit(0, 75, 1700000000), WorkerExit(1, -9, 1700000001)]),
    (MembershipAppender, MembershipReader, [Membership(0, 0, 2, ["n1", "n2"], 100.5, "0"),
                                            EpochEnd(1, 2, 96, 0.5, 101.25), Membership(1, 0, 1, ["n1"], 102.0, None)]),
    (EventAppender, EventReader, [Event(100.0, "hosts", {"hosts": {"n1": 1}}),
                                  Event(101.0, "exit", {"worker": 1, "code": 0, "host": "n1", "why": "exited"})]),
], ids=["requests", "exits", "membership", "events"])
def test_each_channel_reads_back_what_was_appended_as_it_comes(tmp_path: Path, appender: type[LineAppender[object]],
                                                               reader: type[LineReader[object]],
                                                               records: list[object]) -> None:
    path = str(tmp_path / "channel.jsonl")
    lines, seen = appender(path), reader(path)
    assert seen.new() == []  # no file yet
    lines.append(records[0])
    assert seen.new() == [records[0]] and seen.new() == []
    for record in records[1:]:
        lines.append(record)
    assert seen.new() == records[1:]
    assert reader(path).new() == records  # a new reader reads from the start


def test_the_lines_keep_the_keys_other_readers_look_for(tmp_path: Path) -> None:
    path = tmp_path / "membership.jsonl"
    MembershipAppender(str(path)).append(EpochEnd(3, 2, 96, 0.5, 101.25))
    MembershipAppender(str(path)).append(Membership(3, 0, 2, ["a", "b"], 102.0, "1"))
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first == {"kind": "epoch", "epoch": 3, "ranks": 2, "samples": 96, "seconds": 0.5, "unix": 101.25}
    assert '"ranks": 2' in path.read_text() and second["kind"] == "membership"
    requests = tmp_path / "requests.jsonl"
    RequestAppender(str(requests)).append(StartWorker(4, SLOT, {}))
    RequestAppender(str(requests)).append(StopWorker(4))
    assert [json.loads(line) for line in requests.read_text().splitlines()] == [
        {"start": 4, "slot": {"hostname": "n1", "rank": 1, "size": 2, "local_rank": 0, "local_size": 1,
                              "cross_rank": 1, "cross_size": 2}, "env": {}}, {"stop": 4}]
    exits = tmp_path / "exits.jsonl"
    ExitAppender(str(exits)).append(WorkerExit(2, 70, 5))
    assert json.loads(exits.read_text()) == {"id": 2, "code": 70, "unix": 5}


def test_an_event_keeps_its_facts_at_the_top_of_its_line(tmp_path: Path) -> None:
    event = Event(100.0, "start", {"worker": 0, "slot": {"hostname": "a-0"}})
    assert event.to_json() == {"unix": 100.0, "event": "start", "worker": 0, "slot": {"hostname": "a-0"}}
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "exit", "code": 1}\n')
    with pytest.raises(WireError, match=f"^{re.escape(str(path))} line 1: missing unix$"):
        EventReader(str(path)).new()


def test_a_line_still_being_written_is_read_only_once_complete(tmp_path: Path) -> None:
    path = tmp_path / "exits.jsonl"
    seen = ExitReader(str(path))
    whole = json.dumps({"id": 1, "code": 0, "unix": 7}) + "\n"
    path.write_text(whole[:10])
    assert seen.new() == []
    with open(path, "a") as handle:
        handle.write(whole[10:-1])
    assert seen.new() == []  # no newline yet: still being written
    with open(path, "a") as handle:
        handle.write("\n\n")
    assert seen.new() == [WorkerExit(1, 0, 7)]  # the blank line is skipped


@pytest.mark.parametrize(("text", "message"), [
    ('{"id": 1, "code": 0, "unix": 7}\n{"id": 2, "code": 0\n', "line 2 is not valid JSON"),
    ('{"id": 1, "code": 0, "unix": 7}\n\n["id"]\n', "line 3 is list, expected an object"),
    ('{"id": 1, "code": "0", "unix": 7}\n', "line 1: code is str, expected int"),
    ('{"id": 1, "code": 0, "unix": 7, "host": "a"}\n', "line 1: unknown host"),
    (b'{"id": 1, "code": 0, "unix": 7}\n\xff\n', "line 2 is not UTF-8"),
])
def test_a_malformed_complete_line_is_named_by_file_and_number(tmp_path: Path, text: str | bytes, message: str) -> None:
    path = tmp_path / "exits.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(WireError) as error:
        ExitReader(str(path)).new()
    assert str(error.value).startswith(f"{path} {message}")


@pytest.mark.parametrize(("line", "message"), [
    ({"kind": "restart", "epoch": 1}, 'kind is "restart", expected "membership" or "epoch"'),
    ({"kind": "epoch", "epoch": 1, "ranks": 2, "samples": 9, "seconds": "1", "unix": 1.0},
     "seconds is str, expected float"),
    ({"kind": "membership", "epoch": 1, "step": 0, "ranks": 2, "hosts": "a", "unix": 1.0, "worker": None},
     "hosts is str, expected a list"),
])
def test_a_malformed_membership_line_is_named(tmp_path: Path, line: dict[str, object], message: str) -> None:
    path = tmp_path / "membership.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(WireError) as error:
        MembershipReader(str(path)).new()
    assert str(error.value) == f"{path} line 1: {message}"


def test_a_request_that_is_neither_start_nor_stop_is_named(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"restart": 1}\n')
    with pytest.raises(WireError, match="line 1: neither start nor stop$"):
        RequestReader(str(path)).new()
    path.write_text('{"start": 1, "slot": {"hostname": "a"}, "env": {}}\n')
    with pytest.raises(WireError, match="line 1: slot: missing cross_rank, cross_size, local_rank, local_size, rank"):
        RequestReader(str(path)).new()


def test_the_hosts_and_the_driver_result_are_read_back_as_written(tmp_path: Path) -> None:
    hosts, result = Hosts({"n1": 2, "n2": 1}), DriverResult(None, {"n1[0]": WorkerResult(0, 1700000000)}, True)
    hosts.write(str(tmp_path / "hosts.json"))
    result.write(str(tmp_path / "result.json"))
    assert json.loads((tmp_path / "hosts.json").read_text()) == {"n1": 2, "n2": 1}
    assert Hosts.read(str(tmp_path / "hosts.json")) == hosts
    assert DriverResult.read(str(tmp_path / "result.json")) == result
    (tmp_path / "hosts.json").write_text('{"n1": "2"}')
    with pytest.raises(WireError, match=r'hosts.json\["n1"\] is str, expected int$'):
        Hosts.read(str(tmp_path / "hosts.json"))
    (tmp_path / "result.json").write_text('{"error": null, "workers": {"n1[0]": {"code": 0}}, "ok": 1}')
    with pytest.raises(WireError, match=r'result.json: workers\["n1\[0\]"\]: missing unix$'):
        DriverResult.read(str(tmp_path / "result.json"))


def test_the_rendezvous_is_written_byte_for_byte_as_the_launcher_wrote_its_dict(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "before.json", {"addr": "10.0.0.1", "port": 4567, "host": "n1"})
    Rendezvous("10.0.0.1", 4567, "n1").write(str(tmp_path / "rendezvous.json"))
    assert (tmp_path / "rendezvous.json").read_bytes() == (tmp_path / "before.json").read_bytes()
    assert Rendezvous.read(str(tmp_path / "rendezvous.json")) == Rendezvous("10.0.0.1", 4567, "n1")


@pytest.mark.parametrize(("text", "message"), [
    ('{"addr": "10.0.0.1", "port": "4567", "host": "n1"}', ": port is str, expected int"),
    ('{"addr": "10.0.0.1", "port": 4567}', ": missing host"),
    ('{"addr": "10.0.0.1", "port": 4567, "host": "n1", "iface": "lo"}', ": unknown iface"),
    ('{"addr": "10.0.0.1", "po', " is not valid JSON"),
])
def test_a_malformed_rendezvous_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rendezvous.json"
    path.write_text(text)
    with pytest.raises(WireError) as error:
        Rendezvous.read(str(path))
    assert str(error.value).startswith(f"{path}{message}")


def test_a_rank_task_names_a_malformed_rendezvous(tmp_path: Path) -> None:
    (tmp_path / "rendezvous.json").write_text('{"addr": "10.0.0.1", "port": 4567}')
    task = TaskFile(argv=["python3"], logs=str(tmp_path), launcher="gloo", network_interface="lo",
                    max_ranks_per_node=1, nvidia=None, result=str(tmp_path / "rank-{rank}.json"),
                    rendezvous=str(tmp_path / "rendezvous.json"))
    env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "1",
           "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_STEP_NODELIST": "n1"}
    with pytest.raises(LaunchError, match=f"^a malformed rendezvous file: {re.escape(str(tmp_path))}"
                                          "/rendezvous.json: missing host$"):
        rank_environment(task, env)


def test_a_rank_tasks_tmpdir_is_the_jobs_private_folder_on_the_node_and_nothing_else(tmp_path: Path) -> None:
    # the ranks' TMPDIR on Slurm: ``tmp`` in the job's folder on node-local scratch (the staging step makes it), so
    # what a killed rank leaves (AutoGraph's files) goes with the job's folder instead of staying in the node's /tmp
    (tmp_path / "rendezvous.json").write_text('{"addr": "127.0.0.1", "port": 4567, "host": "n1"}')
    job_tmp = tmp_path / "job-8" / "tmp"
    task = TaskFile(argv=["python3"], logs=str(tmp_path), launcher="gloo", network_interface="lo",
                    max_ranks_per_node=1, nvidia=None, result=str(tmp_path / "rank-{rank}.json"),
                    rendezvous=str(tmp_path / "rendezvous.json"), tmpdir=str(job_tmp))
    env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "1", "TMPDIR": "/tmp",
           "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_STEP_NODELIST": "n1"}
    with pytest.raises(LaunchError, match=f"the ranks' TMPDIR {re.escape(str(job_tmp))} is not on .*: the job's "
                                          "staging step makes it"):
        rank_environment(task, env)
    job_tmp.parent.mkdir()
    job_tmp.symlink_to(tmp_path)  # a link there is refused, never followed
    with pytest.raises(UnsafePlace, match=re.escape(str(job_tmp))):
        rank_environment(task, env)
    job_tmp.unlink()
    job_tmp.mkdir(mode=0o700)
    rank, child, notes = rank_environment(task, env)
    assert child["TMPDIR"] == str(job_tmp) and f"TMPDIR {job_tmp}" in notes


@pytest.mark.parametrize(("marker", "name"), [
    (RankFailed(3, "n2", 1700000000.25, "exit code 1"), "rank-3.failed.json"),
    (RankStopped(0, "n1", 1700000001.5), "rank-0.stopped.json"),
], ids=["failed", "stopped"])
def test_a_rank_marker_is_written_byte_for_byte_as_the_rank_task_wrote_its_dict(
        tmp_path: Path, marker: RankFailed | RankStopped, name: str) -> None:
    before = {"rank": marker.rank, "host": marker.host, "unix": marker.unix}
    if isinstance(marker, RankFailed):
        before["reason"] = marker.reason
    write_json_atomic(tmp_path / "before.json", before)
    marker.write(str(tmp_path))
    assert (tmp_path / name).read_bytes() == (tmp_path / "before.json").read_bytes()
    assert type(marker).read(str(tmp_path / name)) == marker
    assert [p.name for p in tmp_path.glob(type(marker).glob())] == [name]


def test_the_launcher_names_a_malformed_rank_marker(tmp_path: Path) -> None:
    RankFailed(0, "n1", 5.0, "exit code 1").write(str(tmp_path))
    (tmp_path / "rank-1.failed.json").write_text('{"rank": 1, "host": "n1", "unix": 4.0}')
    with pytest.raises(LaunchError) as error:
        first_failed_rank(tmp_path)
    assert str(error.value) == f"a malformed rank marker: {tmp_path / 'rank-1.failed.json'}: missing reason"
    (tmp_path / "rank-1.failed.json").write_text('{"rank": "1", "host": "n1", "unix": 4.0, "reason": "x"}')
    with pytest.raises(WireError, match=r"rank-1.failed.json: rank is str, expected int$"):
        RankFailed.read(str(tmp_path / "rank-1.failed.json"))
    (tmp_path / "rank-1.failed.json").unlink()
    (tmp_path / "rank-2.stopped.json").write_text('{"rank": 2, "host": "n1"}')
    with pytest.raises(WireError, match=r"rank-2.stopped.json: missing unix$"):
        RankStopped.read(str(tmp_path / "rank-2.stopped.json"))
    assert first_failed_rank(tmp_path) == RankFailed(0, "n1", 5.0, "exit code 1")


def test_a_staging_report_is_written_byte_for_byte_as_the_staging_task_wrote_its_dict(tmp_path: Path) -> None:
    data = staging_report_json("2", bytes_copied=1234, swept=["/scratch/hvdflow-user/job-7"], SLURM_NODEID=None)
    write_json_atomic(tmp_path / "before.json", data)
    report = StagingReport.read(str(tmp_path / "before.json"))
    report.write(str(tmp_path))
    assert (tmp_path / "task-2.json").read_bytes() == (tmp_path / "before.json").read_bytes()
    assert StagingReport.read(str(tmp_path / "task-2.json")) == report
    assert (report.rank, report.nodeid, report.step_nodelist, report.bytes_copied) == (2, None, "n[1-2]", 1234)


@pytest.mark.parametrize(("change", "message"), [
    ({"SLURM_PROCID": None}, "SLURM_PROCID is null, expected str"),
    ({"SLURM_PROCID": "x1"}, "SLURM_PROCID is 'x1', expected a task number"),
    ({"SLURM_STEP_NODELIST": 2}, "SLURM_STEP_NODELIST is int, expected str"),
    ({"bytes_copied": 1.5}, "bytes_copied is float, expected int"),
    ({"swept": "/scratch"}, "swept is str, expected a list"),
    ({"SLURM_JOB_ID": "5"}, "unknown SLURM_JOB_ID"),
])
def test_a_malformed_staging_report_is_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = tmp_path / "task-0.json"
    path.write_text(json.dumps(staging_report_json("0", **change)))
    with pytest.raises(WireError) as error:
        StagingReport.read(str(path))
    assert str(error.value) == f"{path}: {message}"
    with pytest.raises(LaunchError, match=f"^a malformed staging report: {re.escape(str(path))}: "):
        read_reports(tmp_path)


def test_the_metrics_are_written_byte_for_byte_as_the_trainer_wrote_its_dict(tmp_path: Path) -> None:
    data = {"final": {"accuracy": 0.75, "loss": 0.5, "val_accuracy": 1.0}, "epochs": 3,
            "epoch_seconds": [1.5, 0.25, 1], "steps_per_epoch": 12}
    write_json(str(tmp_path / "before.json"), data)  # how the trainer wrote metrics.json before it was a value
    metrics = TrainingMetrics({"accuracy": 0.75, "loss": 0.5, "val_accuracy": 1.0}, 3, [1.5, 0.25, 1], 12)
    metrics.write(str(tmp_path / "metrics.json"))
    assert (tmp_path / "metrics.json").read_bytes() == (tmp_path / "before.json").read_bytes()
    assert TrainingMetrics.read(str(tmp_path / "metrics.json")) == metrics


@pytest.mark.parametrize(("change", "message"), [
    ({"final": {"val_accuracy": "0.9"}}, 'final["val_accuracy"] is str, expected float'),
    ({"epochs": 3.0}, "epochs is float, expected int"),
    ({"epoch_seconds": None}, "epoch_seconds is null, expected a list"),
    ({"steps": 12}, "unknown steps"),
])
def test_malformed_metrics_are_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"final": {"val_accuracy": 0.9}, "epochs": 3, "epoch_seconds": [1.0],
                                "steps_per_epoch": 12, **change}))
    with pytest.raises(WireError) as error:
        TrainingMetrics.read(str(path))
    assert str(error.value) == f"{path}: {message}"


def test_a_model_check_is_read_back_as_written_for_a_built_model_and_a_script(tmp_path: Path) -> None:
    built = ModelCheck.built("net:build", 650, (8, 8, 1), [None, 10], 10, False, ["model/jitter (RandomUniform)"])
    script = ModelCheck.compiled("train.py", 42)
    for name, check in (("built", built), ("script", script)):
        check.write(str(tmp_path / f"{name}.json"))
        assert ModelCheck.read(str(tmp_path / f"{name}.json")) == check
    written = json.loads((tmp_path / "built.json").read_text())
    assert (written["summary"], written["output_shape"], written["input_shape"]) == (
        "builds a model of 650 parameters, output [None, 10]", [None, 10], [8, 8, 1])
    assert json.loads((tmp_path / "script.json").read_text())["summary"] == "compiles (42 lines); it runs its own loop"
    (tmp_path / "bad.json").write_text(json.dumps({**written, "parameters": "650"}))
    with pytest.raises(WireError, match=r"bad\.json: parameters is str, expected int$"):
        ModelCheck.read(str(tmp_path / "bad.json"))


def _benchmark_result(**changes: object) -> dict[str, object]:
    """Rank 0's result of a 2-rank mlp measurement with TensorFlow, as the trainer wrote it before it was a value."""
    facts = [{"import_seconds": 1.5, "launch_to_import": 2.0, "hostname": "n1", "cpus": [r], "execmode": "R1"}
             for r in range(2)]
    return {"rank": 0, "kind": "mlp", "ranks": 2, "threads": 1, "tensorflow": "2.15.1", "horovod": "0.28.1", "gpus": 0,
            "python": "3.11.2", "measured_seconds": 1.25, "steps": 30, "samples_per_second": 1536.0,
            "parameters": 4810, "batch_size": 32, "warmup_steps": 5, "seconds_to_first_step": 3.5,
            "import_seconds": 1.5, "launch_to_import_seconds": 2.0, "per_rank": facts, **changes}


def test_a_benchmark_result_is_written_byte_for_byte_as_the_trainer_wrote_its_dict(tmp_path: Path) -> None:
    sweep = {k: v for k, v in _benchmark_result().items() if k not in (
        "measured_seconds", "steps", "samples_per_second", "parameters", "batch_size", "warmup_steps",
        "seconds_to_first_step")}
    sweep.update(kind="allreduce", allreduce=[{"size_bytes": 1024, "seconds": 0.5, "iterations": 50,
                                               "bus_bandwidth_bytes_per_second": 2048.0}],
                 tcp={"bytes": 8, "seconds": 1.0, "bytes_per_second": 8.0, "from": "rank 0", "to": "rank 1",
                      "address": ["10.0.0.2", 4000]})
    torch = {**_benchmark_result(), "torch": "2.5.1", "distributed": "ddp"}
    del torch["tensorflow"]
    for name, data in (("model", _benchmark_result()), ("sweep", sweep), ("torch", torch)):
        write_json(str(tmp_path / f"{name}-before.json"), data)
        result = BenchmarkResult.read(str(tmp_path / f"{name}-before.json"))
        result.write(str(tmp_path / f"{name}.json"))
        assert (tmp_path / f"{name}.json").read_bytes() == (tmp_path / f"{name}-before.json").read_bytes(), name
    read = BenchmarkResult.read(str(tmp_path / "sweep.json"))
    assert read.tcp is not None and (read.tcp.sender, read.tcp.receiver) == ("rank 0", "rank 1")
    assert read.samples_per_second is None and read.per_rank[1].cpus == [1]


@pytest.mark.parametrize(("change", "message"), [
    ({"samples_per_second": "fast"}, "samples_per_second is str, expected float"),
    ({"per_rank": [{"import_seconds": 1.0}]}, "per_rank[0]: missing cpus, execmode, hostname, launch_to_import"),
    ({"gpu": 1}, "unknown gpu"),
])
def test_a_malformed_benchmark_result_is_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(_benchmark_result(**change)))
    with pytest.raises(WireError) as error:
        BenchmarkResult.read(str(path))
    assert str(error.value) == f"{path}: {message}"
