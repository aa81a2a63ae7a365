"""``hvdflow site new``'s reading of a cluster and its choices, on what Slurm prints for clusters unlike the test
bed (mixed GPU types across nodes, a CPU partition, accounts): the refusals named before a file is written, the
questions asked only on a terminal, the written profile loaded back by hvdflow's own loader. The run against the
test-bed cluster is in test_slurm_cluster.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hvdflow.config.profile import load_profile
from hvdflow.errors import ConfigError, HvdflowError
from hvdflow.site import choices
from hvdflow.site.ask import Asker
from hvdflow.site.choices import Chosen, SiteError
from hvdflow.site.new import write_profile
from hvdflow.site.node_probe import Interface, NodeFacts, ScratchCandidate, read_node_facts
from hvdflow.site.render import SiteProfile
from hvdflow.slurm.cluster_info import Accounts, gpu_gres, parse_config, parse_partitions
from hvdflow.slurm.layout import gres

# sinfo --noheader --format='%P|%a|%l|%D|%c|%m|%G|%T' of a cluster with a CPU partition (the default), a GPU
# partition mixing a100 nodes (two states) and h100 nodes, and a partition that is down
SINFO = """cpu*|up|1-00:00:00|40|128|256000|(null)|idle
gpu|up|2-00:00:00|6|64|512000|gpu:a100:4(S:0-1)|mixed
gpu|up|2-00:00:00|2|64|512000|gpu:a100:4(S:0-1)|drained
gpu|up|2-00:00:00|4|96|1024000|gpu:h100:8(S:0-1),gpu:1g.10gb:2|idle
old|down|12:00:00|3|32|128000|gpu:2|down
"""


class Said:
    """An asker's terminal: what it wrote, and answers read in turn."""

    def __init__(self, *answers: str) -> None:
        self.lines: list[str] = []
        self.answers = list(answers)

    def write(self, text: str) -> None:
        self.lines.append(text)

    def read(self, prompt: str) -> str:
        self.lines.append(prompt)
        return self.answers.pop(0)


def asker(*answers: str, interactive: bool = False) -> tuple[Asker, Said]:
    said = Said(*answers)
    return Asker(interactive, said.read, said.write), said


def test_sinfo_rows_become_partitions_with_gpus_by_type() -> None:
    parts = {p.name: p for p in parse_partitions(SINFO)}
    assert list(parts) == ["cpu", "gpu", "old"] and parts["cpu"].default and not parts["gpu"].default
    gpu = parts["gpu"]
    assert gpu.nodes == 12 and gpu.cpus_per_node == 64 and gpu.memory_mb == 512000
    assert gpu.gpu_types() == {"a100": (4, 8), "h100": (8, 4), "1g.10gb": (2, 4)}
    assert (gpu.gpus_per_node("a100"), gpu.gpus_per_node("h100"), gpu.gpus_per_node()) == (4, 8, 10)
    assert parts["cpu"].gpu_types() == {} and parts["old"].gpu_types() == {None: (2, 3)}
    assert gpu_gres("gpu:a100:4(S:0-1),gpu:h100:2,mps:100") == {"a100": 4, "h100": 2}
    assert gpu_gres("(null)") == {}


def test_scontrol_config_lines_are_read_as_keys_and_values() -> None:
    text = "Configuration data as of 2026-11-29T05:00:00\nKillWait                = 30 sec\nSLURM_VERSION = 23.02.7\n"
    assert parse_config(text) == {"KillWait": "30 sec", "SLURM_VERSION": "23.02.7"}


def test_a_partition_without_gpus_an_unknown_one_and_a_down_one_are_refused_by_name() -> None:
    parts = parse_partitions(SINFO)
    ask, _ = asker()
    with pytest.raises(SiteError, match=r"--partition cpu: its nodes have no GPUs \(no gpu GRES\); partitions with "
                                        r"GPUs: gpu, old \(or --gpus-per-node 0 to train on CPUs\)"):
        choices.train_partition(parts, "cpu", False, ask)
    assert choices.train_partition(parts, "cpu", True, ask).name == "cpu"  # CPU training asked for
    with pytest.raises(SiteError, match=r"--partition gpux: no such partition; sinfo lists cpu, gpu, old"):
        choices.train_partition(parts, "gpux", False, ask)
    with pytest.raises(SiteError, match=r"--partition old: the partition is down"):
        choices.train_partition(parts, "old", False, ask)


def test_a_gpu_type_no_node_has_and_more_gpus_than_a_node_has_are_refused_by_name() -> None:
    gpu = {p.name: p for p in parse_partitions(SINFO)}["gpu"]
    ask, _ = asker()
    with pytest.raises(SiteError, match=r"--gpu-type v100: no node of gpu has it; its GPUs: up, 12 nodes, gpu:a100:4 "
                                        r"on 8 nodes, gpu:h100:8 on 4 nodes, gpu:1g.10gb:2 on 4 nodes"):
        choices.gpu_type(gpu, "v100", ask)
    assert choices.gpu_type(gpu, "h100", ask).value == "h100"
    with pytest.raises(SiteError, match=r"--gpus-per-node 6: gpu's nodes have at most 4 a100 GPUs"):
        choices.gpus_per_node(gpu, "a100", 6)
    assert choices.gpus_per_node(gpu, "a100", None) == 4


def test_without_a_terminal_the_defaults_are_taken_and_said_and_nothing_is_read() -> None:
    parts = parse_partitions(SINFO)
    ask, said = asker()  # no answers: reading would fail
    train = choices.train_partition(parts, None, False, ask)
    assert train.name == "gpu"  # the default partition has no GPUs: the one with most GPU nodes
    assert choices.gpu_type(train, None, ask).value is None  # several types: any
    known = Accounts("ana", ["chem", "phys"], "phys")
    assert choices.account(known, None, ask).value == "phys"
    assert said.lines[0].startswith("hvdflow site new: the training partition: gpu (up, 12 nodes") and \
        said.lines[0].endswith("; --partition sets another)"), said.lines
    assert all(not line.endswith("]: ") for line in said.lines), said.lines


def test_on_a_terminal_the_choices_are_numbered_the_default_marked_and_a_number_or_name_answers() -> None:
    parts = parse_partitions(SINFO)
    gpu = {p.name: p for p in parts}["gpu"]
    ask, said = asker("9", "3", interactive=True)  # 9 is no option: asked again
    assert choices.gpu_type(gpu, None, ask).value == "a100"  # 1) any  2) 1g.10gb  3) a100  4) h100
    assert "  1) any: any type, up to 10 per node  [default]" in said.lines
    assert "  '9' is none of them: a number from 1 to 4, or a name" in said.lines
    ask, _ = asker("", interactive=True)
    assert choices.account(Accounts("ana", ["chem", "phys"], "phys"), None, ask).value == "phys"  # Enter: default
    ask, _ = asker("chem", interactive=True)
    assert choices.account(Accounts("ana", ["chem", "phys"], "phys"), None, ask).value == "chem"
    ask, _ = asker("x", "y", "z", interactive=True)
    with pytest.raises(HvdflowError, match=r"the account: no answer among the options after three tries; pass --account"):
        choices.account(Accounts("ana", ["chem", "phys"], "phys"), None, ask)
    with pytest.raises(SiteError, match=r"--account bio: not one of ana's accounts \(chem, phys\)"):
        choices.account(Accounts("ana", ["chem", "phys"], "phys"), "bio", ask)


def _facts(*scratch: ScratchCandidate, interfaces: tuple[Interface, ...] = ()) -> NodeFacts:
    return NodeFacts("g042", list(scratch), list(interfaces), None, ["0"], [])


def test_scratch_shared_with_the_login_node_is_passed_over_and_none_local_is_refused() -> None:
    shared = ScratchCandidate("/tmp", "/tmp", True, 10 * 2**30, False, "shared")
    local = ScratchCandidate("/local", "/local", True, 500 * 2**30, True, "writable")
    unset = ScratchCandidate("$TMPDIR", "$TMPDIR", False, 0, None, "the job does not set it")
    assert choices.scratch(_facts(unset, shared, local), None).value == "/local"
    with pytest.raises(SiteError, match=r"no node-local scratch found on g042 \(\$TMPDIR: the job does not set it; "
                                        r"/tmp: shared\): pass --scratch DIR"):
        choices.scratch(_facts(unset, shared), None)
    with pytest.raises(SiteError, match=r"--scratch /tmp: on g042 shared"):
        choices.scratch(_facts(shared), "/tmp")


def test_the_high_speed_interface_is_taken_before_a_faster_ethernet() -> None:
    eth = Interface("eth0", "10.0.0.42", 25000)
    ib = Interface("ib0", "10.1.0.42", None)
    facts = _facts(interfaces=(eth, ib, Interface("eth1", "192.168.0.42", 1000)))
    assert choices.network_interface(facts, None).value == "ib0"
    assert choices.network_interface(_facts(interfaces=(Interface("eno1", "a", 1000), eth)), None).value == "eth0"
    with pytest.raises(SiteError, match=r"--interface hsn0: g042 has no such interface with an address"):
        choices.network_interface(facts, "hsn0")
    assert choices.network_interface(_facts(), None).value == "auto"


def test_where_a_second_node_tried_only_the_interfaces_it_reached_are_chosen() -> None:
    eth, ib = Interface("eth0", "10.0.0.42", 25000), Interface("ib0", "10.1.0.42", None)
    facts = NodeFacts("g042", [], [eth, ib], None, [], [], peer="g043", reached=["eth0"])
    chosen = choices.network_interface(facts, None)
    assert chosen.value == "eth0" and chosen.said.startswith("probe job: g043 reached g042 on eth0 of eth0 10.0.0.42")
    with pytest.raises(SiteError, match=r"--interface ib0: g043 could not reach g042 on it"):
        choices.network_interface(facts, "ib0")
    with pytest.raises(SiteError, match=r"no interface of g042 was reached from g043 \(eth0 10.0.0.42 25000 Mb/s, "
                                        r"ib0 10.1.0.42\): ask the site"):
        choices.network_interface(NodeFacts("g042", [], [eth, ib], None, [], [], peer="g043", reached=[]), None)


def test_two_tasks_meet_in_a_folder_and_the_listener_names_the_interfaces_reached(tmp_path: Path) -> None:
    # the probe's two tasks on one machine: the second connects to what the first listens on (loopback here)
    import threading

    from hvdflow.site import reach as meeting

    second = threading.Thread(target=meeting.connect, args=(tmp_path,))
    second.start()
    met = meeting.listen(tmp_path, {"lo": "127.0.0.1"})
    second.join(timeout=60)
    assert met.peer and met.reached == ["lo"], met
    assert (tmp_path / meeting.LISTENING).exists() and (tmp_path / meeting.DONE).read_text() == met.peer


def test_the_registry_is_the_flag_or_the_users_variable_and_neither_is_refused_naming_both() -> None:
    # a new user following the README ran site new before setting a registry: the profile then read an unset
    # variable and its own doctor failed on it (benchmarks/new_user.sh, issue 46)
    assert choices.registry("http://reg:5000", {}) == Chosen("http://reg:5000", "--registry; the login node reaches "
                                                                                "it (pulls run there)")
    assert choices.registry("none", {"HVDFLOW_REGISTRY": "http://x"}).value == "none"
    chosen = choices.registry(None, {"HVDFLOW_REGISTRY": "http://reg:5000"})
    assert chosen.value == "${HVDFLOW_REGISTRY}" and "now http://reg:5000" in chosen.said
    for environ in ({}, {"HVDFLOW_REGISTRY": ""}):
        with pytest.raises(SiteError, match=r"no --registry given and \$HVDFLOW_REGISTRY is not set: give --registry "
                                            r"URL .* or --registry none"):
            choices.registry(None, environ)


def test_the_probes_line_reads_back_and_a_malformed_one_is_named() -> None:
    facts = _facts(ScratchCandidate("/local", "/local", True, 5, True, "writable"),
                   interfaces=(Interface("ib0", "10.1.0.42", 200000),))
    assert read_node_facts(f"noise\n{facts.line()}\n") == facts
    assert read_node_facts("no line here") is None
    with pytest.raises(ValueError, match=r"the node probe's line"):
        read_node_facts('hvdflow-site-node: {"host": 3}')


def _site(name: str, kind: Chosen) -> SiteProfile:
    said = Chosen("x", "from here")
    return SiteProfile(
        name=name, header="on a day from sinfo", account=Chosen(None, "none listed"), partition=Chosen("cpu", "s"),
        partition_runtime=60, train_partition=Chosen("gpu", "s"), train_runtime=Chosen("240", "s"),
        train_mem_mb=Chosen("460800", "s"), train_cpus_per_task=Chosen("16", "s"),
        registry=Chosen("http://reg:5000", "--registry"),
        execmode=Chosen("auto", "s"), network_interface=Chosen("ib0", "s"), scratch_dir=Chosen("/local", "s"),
        gpus_per_node=Chosen("4", said.said), gpu_type=kind)


def test_the_written_profile_loads_and_its_jobs_ask_for_the_gpu_type(tmp_path: Path) -> None:
    target = tmp_path / "profiles" / "mycluster"
    target.parent.mkdir()
    write_profile(_site("mycluster", Chosen("a100", "--gpu-type")), target, force=False)
    cluster = load_profile(target / "hvdflow.yaml")
    assert cluster.slurm is not None and (cluster.slurm.gpus_per_node, cluster.slurm.gpu_type) == (4, "a100")
    assert gres(8, 2, cluster.slurm) == "gpu:a100:4" and cluster.slurm.gpu_gres(1) == "gpu:a100:1"
    resources = yaml.safe_load((target / "config.yaml").read_text())
    assert "slurm_account" not in resources["default-resources"]  # none known: Slurm's default
    assert resources["set-resources"]["train"] == {"slurm_partition": "gpu", "runtime": 240, "mem_mb": 460800,
                                                   "cpus_per_task": 16}
    assert "# slurm_account: not set (none listed)" in (target / "config.yaml").read_text()
    assert all(len(line) <= 120 or "#" not in line[:100] for line in (target / "hvdflow.yaml").read_text().splitlines())
    assert [p.name for p in target.parent.iterdir()] == ["mycluster"]  # the staging folder is gone


def test_a_profile_that_does_not_load_is_not_moved_into_place(tmp_path: Path) -> None:
    target = tmp_path / "profiles" / "bad"
    target.parent.mkdir()
    with pytest.raises(ConfigError, match=r"gpu_type: 'a 100' is not a GRES type"):
        write_profile(_site("bad", Chosen("a 100", "typed wrong")), target, force=False)
    assert list(target.parent.iterdir()) == []


def test_a_gpu_type_without_gpus_is_refused_by_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "hvdflow.yaml"
    path.write_text("registry: none\nruntime: {kind: udocker}\nlauncher: gloo\nscheduler: slurm\n"
                    "slurm: {scratch_dir: /local, gpus_per_node: 0, gpu_type: a100}\n")
    with pytest.raises(ConfigError, match=r"slurm.gpu_type: a100 given but gpus_per_node is 0"):
        load_profile(path)
