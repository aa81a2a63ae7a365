"""The run record as a page of the Snakemake report: what ran, where and with what, next to the plots.

One HTML table from ``run.json``: the image by digest, the code revision, seeds, versions, the proot engine, the
numeric settings, each host's CPU and GPUs, each rank's host, cores and threads, how each rank used its cores,
memory and GPU, the Slurm job and the attempts. The
record itself stays the reference; this page only shows it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Iterable, Optional

from .run_report import EPOCH_HEADER, epoch_rows
from .verdict import allocation_verdict

_STYLE = ("body{font-family:sans-serif;font-size:14px}table{border-collapse:collapse;margin-bottom:1em}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}")


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _table(title: str, rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(key)}</th><td>{html.escape(_text(value))}</td></tr>" for key, value in rows)
    return f"<h3>{html.escape(title)}</h3><table>{body}</table>"


def _grid(title: str, header: list[str], rows: Iterable[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_text(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h3>{html.escape(title)}</h3><table><tr>{head}</tr>{body}</table>"


def _code(code: dict[str, Any]) -> str:
    if code.get("commit") is None:
        return code.get("note", "unknown")
    return f"{code['commit']}" + (f" + changes (diff sha256 {code['diff_sha256']})" if code.get("dirty") else "")


def _slurm(slurm: Optional[dict[str, Any]]) -> list[tuple[str, Any]]:
    if not slurm:
        return [("Slurm", "none: this machine")]
    alloc = slurm["allocation"]
    return [("Slurm job", f"{slurm['job_id']} (restarts: {alloc['restarts']})"),
            ("partition / account", f"{alloc['partition']} / {alloc['account']}"), ("nodes", slurm["nodelist"]),
            ("tasks per node", slurm["tasks_per_node"]), ("CPUs per task", alloc["cpus_per_task"]),
            ("time limit", alloc["time_limit"])]


def _usage(usage: Optional[dict[str, Any]]) -> list[Any]:
    """A rank's use of its allocation as the grid's cells: cores, CPU use, peak memory, GPU, seconds, samples."""
    if not usage:
        return ["not sampled", "", "", "", "", ""]
    gpu = usage["gpu"]
    gpu_text = (f"{gpu['name']}: {gpu['utilization_percent_mean']} % busy, {gpu['memory_used_mib_peak']:.0f} of "
                f"{gpu['memory_total_mib']:.0f} MiB" if gpu else usage["gpu_absent"])
    return [usage["cores"], f"{100 * usage['cpu_utilization']:.0f} %", f"{usage['peak_rss_mib']:.0f} MiB", gpu_text,
            usage["wall_seconds"], f"{len(usage['samples'])} every {usage['interval_seconds']} s"]


def record_page(record: dict[str, Any]) -> str:
    """The HTML page of a run record."""
    image = record["image"]
    verdict = allocation_verdict(record)
    versions = record["versions"]
    proot = record["proot"]
    parts = [
        _table(f"Run record of experiment {record['experiment']}", [
            ("image", f"{image['reference']}@{image['digest']}"), ("registry", image["registry"]),
            ("runtime / launcher", f"{record['runtime']} / {record['launcher']}"),
            ("proot engine", f"{proot['choice']}: {proot['binary']} (sha256 {proot['sha256']})" if proot else None),
            ("code", _code(record["code"])), ("seeds", record["seeds"]),
            ("final weights sha256", record["weights_sha256"]),
            ("started / ended", f"{record['started']} / {record['ended']} ({record['seconds']} s)"),
            *_slurm(record["slurm"]),
        ]),
        _table("Versions", sorted(versions.items())),
        _table("Settings that fix the order of floating-point sums", sorted(record["numerics"].items())),
        _grid("Hosts", ["host", "CPU", "CPU flags", "GPUs", "NVIDIA driver"],
              [[host, m["cpu"]["model"], f"{len(m['cpu']['flags'])} flags: " + " ".join(
                  f for f in m["cpu"]["flags"] if f.startswith(("avx", "fma", "sse4", "amx"))),
                m["gpus"], m["nvidia_driver"]] for host, m in sorted(record["machines"].items())]),
        _grid("Ranks", ["rank", "host", "local rank", "cores", "threads", "GPU", "weights sha256"],
              [[r["rank"], r["hostname"], r["local_rank"], r["cpus"], r["threads"], r["cuda_visible_devices"],
                r["weights_sha256"][:16]] for r in record["ranks"]]),
        _grid("How the ranks used their allocation", ["rank", "host", "cores", "CPU use", "peak memory", "GPU",
                                                      "seconds", "samples"],
              [[r["rank"], r["hostname"], *_usage(r.get("usage"))] for r in record["ranks"]]),
        _table("What limited the run", [("verdict", verdict.line), *(
            (f"{part} share of step time", f"{100 * share:.0f} %") for part, share in verdict.shares.items()),
            ("slowest rank", f"{verdict.slowest.rank} on {verdict.slowest.hostname} ({verdict.slowest.seconds:.2f} s "
                             f"in {verdict.slowest.steps} steps)" if verdict.slowest else None)]),
        _grid("The step time per epoch, all ranks", EPOCH_HEADER, epoch_rows(record)),
        _grid("Where the ranks' steps spent their time", ["rank", "host", "steps", "input s", "compute s",
                                                          "communication s"],
              [[r.rank, r.hostname, r.steps, f"{r.input_seconds:.3f}", f"{r.compute_seconds:.3f}",
                f"{r.communication_seconds:.3f}"] for r in verdict.ranks]),
        _grid("Attempts", ["attempt", "where", "from", "to", "outcome"],
              [[a["attempt"], a["slurm_job_id"] or a["host"], a["from"], a.get("to"), a["outcome"]]
               for a in record["attempts"]]),
    ]
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>run record {html.escape(record['experiment'])}"
            f"</title><style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>\n")


def write_record_page(run_json: Path, out: Path) -> None:
    """Write the page of ``run_json`` to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(record_page(json.loads(run_json.read_text())))
