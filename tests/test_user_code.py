"""A user's own model code, the parts that need no image: loading and calling the user's functions with errors in
the user's terms (file and line, module, function, arguments), the config's model form checked at parse time, and
the record of the code's files."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from conftest import REPO
from hvdflow.config.experiment import TrainSpec
from hvdflow.config.parse_time import schema_problem
from hvdflow.config.user_code import UserModel, code_files, tree_sha256
from hvdflow.errors import ConfigError, LaunchError, RerunRefused
from hvdflow.launch.job import TrainingJob
from hvdflow.rerun.user_code import restore_user_code
from hvdflow_trainer import user_code
from hvdflow_trainer.check_model import check_script
from hvdflow_trainer.options import TrainOptions
from hvdflow_trainer.run_control import StopFlag
from hvdflow_trainer.script import run_script
from hvdflow_trainer.user_code import UserCodeError, call, load_function
from hvdflow_wire.model_check import ModelCheck
from hvdflow_wire.user_code import USER_CODE_ERROR, user_code_error

MODULES = {
    "good.py": "def build(input_shape, num_classes, multi_label, depth=2):\n    return (input_shape, depth)\n",
    "syntax.py": "def build(input_shape, num_classes, multi_label):\n    return [\n\ndef other(:\n",
    "needs.py": "import surely_not_installed_anywhere\n\ndef build(**kw):\n    return 1\n",
    "raises.py": "def build(input_shape, num_classes, multi_label):\n    x = 1\n    return x / 0\n",
    "narrow.py": "def build(shape):\n    return shape\n",
    "pkg/__init__.py": "",
    "pkg/deep.py": "def build(input_shape, num_classes, multi_label):\n    return 'deep'\n",
}


@pytest.fixture
def code(tmp_path: Path) -> Iterator[Path]:
    """A user's folder of modules (each test's own: a module imported once stays in sys.modules)."""
    folder = tmp_path / f"code{os.getpid()}"
    for name, text in MODULES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p != str(folder)]


ARGS = {"input_shape": (8, 8, 1), "num_classes": 10, "multi_label": False}


def test_a_function_is_loaded_and_called_with_the_datasets_arguments_and_params(code: Path) -> None:
    assert call(load_function(str(code), "good:build"), "good:build", str(code), **ARGS, depth=4) == ((8, 8, 1), 4)
    assert call(load_function(str(code), "pkg.deep:build"), "pkg.deep:build", str(code), **ARGS) == "deep"


def test_each_mistake_in_the_users_code_is_named_in_their_terms(code: Path) -> None:
    with pytest.raises(UserCodeError, match=rf"{code}/syntax.py, line 4: .* \(in {code}, the module of syntax:build\)"):
        load_function(str(code), "syntax:build")
    with pytest.raises(UserCodeError, match=rf"^absent:build: no module absent in {code}$"):
        load_function(str(code), "absent:build")
    with pytest.raises(UserCodeError, match=r"^needs:build: module needs imports surely_not_installed_anywhere, "
                                            r"which the image does not have$"):
        load_function(str(code), "needs:build")
    with pytest.raises(UserCodeError, match=rf"^good:nothere: {code}/good.py has no function nothere$"):
        load_function(str(code), "good:nothere")
    with pytest.raises(UserCodeError, match=r"^narrow:build\(shape\) cannot be called with input_shape, multi_label, "
                                            r"num_classes: "):
        call(load_function(str(code), "narrow:build"), "narrow:build", str(code), **ARGS)
    with pytest.raises(UserCodeError, match=r"good:build\(input_shape, num_classes, multi_label, depth=2\) cannot be "
                                            r"called with depth, input_shape, multi_label, num_classes, width: .*'width'"):
        call(load_function(str(code), "good:build"), "good:build", str(code), **ARGS, depth=3, width=5)
    with pytest.raises(UserCodeError, match=rf"^raises:build raised ZeroDivisionError: division by zero \(at "
                                            rf"{code}/raises.py, line 3\)$"):
        call(load_function(str(code), "raises:build"), "raises:build", str(code), **ARGS)


def test_params_that_hvdflow_gives_are_refused_by_name(code: Path) -> None:
    ref = user_code.UserModelRef(str(code), "good:build", {"num_classes": 3})
    with pytest.raises(UserCodeError, match=r"good:build: params num_classes are given by hvdflow"):
        user_code.built_by_user(ref, (8, 8, 1), 10, False)  # what both frameworks' build_user_model call first


def test_the_error_line_goes_from_the_trainer_to_the_host() -> None:
    log = "epoch 1\n" + USER_CODE_ERROR + "narrow:build(shape) cannot be called\nTraceback? no\n"
    assert user_code_error(log) == "narrow:build(shape) cannot be called"
    assert user_code_error("all fine\n") is None


def test_the_config_names_the_folder_and_module_before_any_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "unet.py").write_text("def build(**kw): pass\n")
    entry = {"code": "models", "build": "unet:build", "params": {"depth": 4}}
    user = UserModel.from_config("experiments.x.model", entry, tmp_path)
    assert user.code == tmp_path / "models" and user.params == {"depth": 4}
    assert user.trainer_args() == ["--model-code", str(tmp_path / "models"), "--model-build", "unet:build",
                                   "--model-params", '{"depth": 4}']
    with pytest.raises(ConfigError, match=r"^experiments.x.model.code: nowhere is not a folder \(looked for "):
        UserModel.from_config("experiments.x.model", {**entry, "code": "nowhere"}, tmp_path)
    with pytest.raises(ConfigError, match=r"^experiments.x.model.build: other:build: no module other in "):
        UserModel.from_config("experiments.x.model", {**entry, "build": "other:build"}, tmp_path)
    # a file that does not parse: the build, loss or metrics module, or a script, named with its line at parse time
    (tmp_path / "models" / "broken.py").write_text("def build(**kw):\n    return (\n")
    for key, value in (("build", "broken:build"), ("loss", "broken:loss"), ("metrics", "broken:metrics")):
        with pytest.raises(ConfigError, match=rf"^experiments.x.model.{key}: \S+/models/broken\.py, line 2: '\(' "
                                              r"was never closed \(the file does not parse"):
            UserModel.from_config("experiments.x.model", {**entry, key: value}, tmp_path)
    with pytest.raises(ConfigError, match=r"^experiments.x.model.script: \S+/models/broken\.py, line 2: "):
        UserModel.from_config("experiments.x.model", {"code": "models", "script": "broken.py"}, tmp_path)
    spec = TrainSpec(ranks=2, model=entry, hidden_units=64, epochs=1, batch_size=8, learning_rate=0.01, momentum=0.9,
                     warmup_epochs=0, seed=1)
    args = spec.trainer_args()
    assert args[:8] == ["--model", "user", "--model-code", str(tmp_path / "models"), "--model-build", "unet:build",
                        "--model-params", '{"depth": 4}']
    assert "--no-op-determinism" not in args
    assert TrainSpec(**{**spec.__dict__, "deterministic": False}).trainer_args()[-1] == "--no-op-determinism"
    # what the host writes is what the trainer reads, once, into its typed options
    options = TrainOptions.parse(TrainingJob(args, 2, 1, tmp_path / "data", tmp_path / "out", tmp_path).argv()[3:]
                                 + ["--checkpoint-dir", "c", "--identity", "i"])
    assert (options.model, options.dataset, options.epochs, options.learning_rate, options.seed) == (
        "user", str(tmp_path / "data"), 1, 0.01, 1)
    assert user_code.user_model_of(options) == user_code.UserModelRef(
        str(tmp_path / "models"), "unet:build", {"depth": 4}, None, None, "")


def test_the_code_is_recorded_file_by_file_and_its_tree_hash_follows_every_byte(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "net.py").write_text("def build(**kw): pass\n")
    files = code_files(tmp_path)
    assert sorted(files) == ["net.py", "pkg/__init__.py"]
    before = tree_sha256(files)
    (tmp_path / "net.py").write_text("def build(**kw): pass \n")
    assert tree_sha256(code_files(tmp_path)) != before


def test_a_rerun_puts_the_recorded_code_back_or_refuses_the_file_that_changed(tmp_path: Path) -> None:
    workdir, into = tmp_path / "run", tmp_path / "rerun"
    (workdir / "mymodels").mkdir(parents=True)
    (workdir / "mymodels" / "net.py").write_text("def build(**kw): pass\n")
    files = code_files(workdir / "mymodels")
    (workdir / "readers").mkdir()
    (workdir / "readers" / "mine.py").write_text("def read(path, item): pass\n")
    readers = code_files(workdir / "readers")
    record = {"user_code": {"folder": "mymodels", "files": files}, "reader_code": {"folder": "readers", "files": readers}}
    assert restore_user_code({"user_code": None, "reader_code": None}, workdir, into) == []
    # git does not hold them: copied from the run's working directory, every file checked
    assert restore_user_code(record, workdir, into) == [f"model code: mymodels copied from {workdir}, sha256 checked",
                                                        f"reader code: readers copied from {workdir}, sha256 checked"]
    assert code_files(into / "mymodels") == files and code_files(into / "readers") == readers
    # the worktree already holds the recorded bytes (the commit had them): nothing copied
    assert restore_user_code(record, workdir, into) == ["model code: mymodels from the recorded commit, sha256 checked",
                                                        "reader code: readers from the recorded commit, sha256 checked"]
    (workdir / "mymodels" / "net.py").write_text("def build(**kw): return 1\n")
    (into / "mymodels" / "net.py").unlink()
    with pytest.raises(RerunRefused, match=rf"^{workdir}/mymodels/net.py: sha256 [0-9a-f]{{64}}, but the record says "
                                           rf"{files['net.py']}: the model code changed since the run"):
        restore_user_code(record, workdir, into)
    assert not (into / "mymodels" / "net.py").exists()
    (workdir / "readers" / "mine.py").unlink()
    (into / "readers" / "mine.py").unlink()
    with pytest.raises(RerunRefused, match=rf"^{workdir}/readers/mine.py: a file of the recorded reader code is "
                                           r"missing: the reader code changed since the run"):
        restore_user_code({"reader_code": record["reader_code"]}, workdir, into)


def _script_args(code: Path, script: str) -> TrainOptions:
    return TrainOptions(model_code=str(code), model_script=script)


@pytest.mark.parametrize("text, said", [
    ("print('no run at all')\n", "the training script s.py ended without calling run.finish(): hvdflow has no model"),
    ("import sys\nsys.exit(2)\n", "the training script s.py exited with 2"),
    ("x = {}\ny = x['missing']\n", r"the training script s.py raised KeyError: 'missing' (at "),
])
def test_a_training_script_that_fails_or_never_finishes_is_named(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "s.py").write_text(text)
    with pytest.raises(UserCodeError) as caught:
        run_script(_script_args(tmp_path, "s.py"), StopFlag())
    assert said in str(caught.value)
    if "raised" in said:
        assert str(caught.value).endswith(f"{tmp_path / 's.py'}, line 2)")


def test_a_script_that_does_not_parse_is_named_by_the_check_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("import os\n\nfor x in range(3)\n    pass\n")
    with pytest.raises(UserCodeError, match=r"s\.py, line 3: .* \(the training script\)"):
        check_script(str(tmp_path), "s.py")
    (tmp_path / "t.py").write_text("print(1)\n")
    assert check_script(str(tmp_path), "t.py") == ModelCheck.compiled("t.py", 1)
    assert ModelCheck.compiled("t.py", 1).summary == "compiles (1 lines); it runs its own loop"


def test_a_script_is_checked_in_the_config_and_runs_only_the_fixed_allreduce_set_up(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "train.py").write_text("pass\n")
    model = {"code": "loop", "script": "train.py", "params": {"hidden": 8}}
    entry = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": 2, "epochs": 1, "batch_size": 8,
             "learning_rate": 0.1, "model": model}
    defaults = {"hidden_units": 64, "momentum": 0.9, "warmup_epochs": 1, "seed": 42}   # what the schema fills in
    user = TrainSpec.from_config({**entry, **defaults}).user_model()
    assert user is not None and (user.build, user.script, user.entry) == (None, "train.py", "train.py")
    assert user.trainer_args() == ["--model-code", str(tmp_path / "loop"), "--model-script", "train.py",
                                   "--model-params", '{"hidden": 8}']
    with pytest.raises(ConfigError, match=r"model\.script: other\.py is not a file of "):
        TrainSpec.from_config({**entry, **defaults, "model": {**model, "script": "other.py"}}).user_model()
    for changed in ({"elastic": {"min_ranks": 1}}, {"strategy": "neighbour"}):
        with pytest.raises(LaunchError, match=r"a training script \(train\.py\) runs its own loop"):
            TrainSpec.from_config({**entry, **defaults, **changed})
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    schema = REPO / "workflow" / "schemas" / "config.schema.yaml"
    assert schema_problem({**shipped, "experiments": {"loop": entry}}, schema) is None
    both = {**entry, "model": {**model, "build": "m:build"}}
    assert schema_problem({**shipped, "experiments": {"loop": both}}, schema) is not None
