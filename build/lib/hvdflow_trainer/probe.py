"""What an image holds that the trainer and the preparation need: ``python3 -m hvdflow_trainer.probe`` prints it as
one JSON object (``hvdflow image check`` reads it).

Written for any Python 3 an image may have (no annotations, no f-strings), so that a too-old interpreter is
reported rather than failing to parse this file; every import is tried on its own and its error kept.
"""

import json
import platform
import sys

PREPARATION = ("numpy", "tifffile", "imagecodecs", "pyarrow", "sklearn")
CONTROLLERS = ("gloo", "mpi", "nccl", "cuda", "rocm", "ddl", "ccl")


def _module(name):
    """(the module, None) or (None, why it does not import)."""
    try:
        return __import__(name, fromlist=["_"]), None
    except Exception as exc:  # an image may fail in any way: report it, do not stop
        return None, "{}: {}".format(type(exc).__name__, exc).strip()


def _version(module):
    return str(getattr(module, "__version__", "unknown"))


def _tensorflow():
    tf, error = _module("tensorflow")
    if tf is None:
        return {"error": error}
    facts = {"version": _version(tf)}
    keras = getattr(tf, "keras", None)
    facts["keras"] = str(getattr(keras, "__version__", None) or _version(_module("keras")[0] or object()))
    try:
        info = dict(tf.sysconfig.get_build_info())
        facts["cuda_build"] = bool(info.get("is_cuda_build"))
        facts["cuda"] = info.get("cuda_version")
        facts["cudnn"] = info.get("cudnn_version")
    except Exception as exc:
        facts["build_info_error"] = str(exc)
    return facts


def _torch():
    torch, error = _module("torch")
    if torch is None:
        return {"error": error}
    facts = {"version": _version(torch), "cuda": getattr(torch.version, "cuda", None)}
    facts["cuda_build"] = facts["cuda"] is not None
    vision, error = _module("torchvision")
    facts["torchvision"] = _version(vision) if vision is not None else error
    dist, error = _module("torch.distributed")
    if dist is None or not dist.is_available():
        facts["distributed_error"] = error or "torch.distributed is not available in this build"
    else:
        facts["distributed"] = {name: bool(getattr(dist, "is_%s_available" % name)())
                                for name in ("gloo", "nccl", "mpi")}
    return facts


def _built(hvd):
    built = {}
    for name in CONTROLLERS:
        probe = getattr(hvd, name + "_built", None)
        try:
            built[name] = bool(probe()) if probe is not None else None
        except Exception:
            built[name] = False
    return built


def _horovod():
    horovod, error = _module("horovod")
    if horovod is None:
        return {"error": error}
    facts = {"version": _version(horovod)}
    for framework, key in (("tensorflow", "built"), ("torch", "torch_built")):
        hvd, error = _module("horovod." + framework)
        if hvd is None:
            facts[framework + "_error"] = error
        else:
            facts[key] = _built(hvd)
    return facts


def probe():
    """The facts, as a JSON-ready dict."""
    modules = {}
    for name in PREPARATION:
        module, error = _module(name)
        modules[name] = {"version": _version(module)} if module is not None else {"error": error}
    return {"python": platform.python_version(), "executable": sys.executable, "tensorflow": _tensorflow(),
            "torch": _torch(), "horovod": _horovod(), "modules": modules}


if __name__ == "__main__":
    sys.stdout.write("HVDFLOW-PROBE " + json.dumps(probe(), sort_keys=True) + "\n")
