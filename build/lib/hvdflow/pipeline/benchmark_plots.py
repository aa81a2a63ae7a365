"""The benchmark's figures in the report: throughput and scaling efficiency against ranks, udocker against native,
allreduce bus bandwidth against message size beside raw TCP's, and the frameworks side by side, all from the
summary's rows."""

from __future__ import annotations

from pathlib import Path

from hvdflow.config.benchmark import FRAMEWORKS, framework_of
from hvdflow.pipeline.benchmark import Row
from hvdflow.pipeline.plots import plt, save


def _series(rows: list[Row], metric: str) -> dict[tuple[str, str, int], list[Row]]:
    """``metric``'s rows per (kind, runtime, nodes), in rank order."""
    series: dict[tuple[str, str, int], list[Row]] = {}
    for row in sorted((r for r in rows if r.metric == metric), key=lambda r: r.ranks):
        series.setdefault((row.kind, row.runtime, row.nodes), []).append(row)
    return series


def _against_ranks(rows: list[Row], metric: str, ylabel: str, title: str, out: Path, ideal: bool = False) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = _series(rows, metric)
    for (kind, runtime, nodes), points in series.items():
        ax.errorbar([p.ranks for p in points], [p.mean for p in points], yerr=[p.ci95 for p in points], marker="o",
                    capsize=3, linestyle="-" if runtime == "udocker" else "--",
                    label=f"{kind}, {runtime}, {nodes} node(s)")
    if series:
        ax.set_xticks(sorted({p.ranks for points in series.values() for p in points}))
    if ideal and series:
        ax.axhline(1.0, color="grey", linewidth=0.8)
    if not series:
        ax.text(0.5, 0.5, f"no {metric} measured", ha="center", transform=ax.transAxes)
    ax.set_xlabel("ranks")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    save(fig, out)


def plot_throughput(rows: list[Row], out: Path) -> None:
    """Global samples/s after warm-up against ranks, mean ± 1.96σ, one line per model, runtime and node count."""
    _against_ranks(rows, "samples_per_second", "samples/s (after warm-up)", "Training throughput", out)


def plot_efficiency(rows: list[Row], out: Path) -> None:
    """Scaling efficiency X(N) / (N · X(1)) against ranks (1 is perfect scaling)."""
    _against_ranks(rows, "efficiency", "X(N) / (N X(1))", "Scaling efficiency", out, ideal=True)


def plot_runtime_ratio(rows: list[Row], out: Path) -> None:
    """Each udocker runtime (mode) over native per measurement: training time per sample and time to the first step
    (1 is parity)."""
    by_key = {r.key: r for r in rows}
    labels, steady, first = [], [], []
    for row in rows:
        if row.runtime == "native" or row.metric != "samples_per_second":
            continue
        native = by_key.get((row.kind, row.ranks, row.nodes, "native", row.metric, 0))
        native_first = by_key.get((row.kind, row.ranks, row.nodes, "native", "seconds_to_first_step", 0))
        container_first = by_key.get((row.kind, row.ranks, row.nodes, row.runtime, "seconds_to_first_step", 0))
        if native is None or native_first is None or container_first is None:
            continue
        labels.append(f"{row.kind}\n{row.ranks}r/{row.nodes}n\n{row.runtime}")
        steady.append(native.mean / row.mean)
        first.append(container_first.mean / native_first.mean)
    fig, ax = plt.subplots(figsize=(max(5, len(labels) * 1.2), 4.5))
    if labels:
        xs = list(range(len(labels)))
        ax.bar([x - 0.2 for x in xs], steady, width=0.4, label="time per sample after warm-up")
        ax.bar([x + 0.2 for x in xs], first, width=0.4, label="time to the first step")
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, fontsize=8)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "needs runtimes: [udocker, native]", ha="center", transform=ax.transAxes)
    ax.set_ylabel("udocker / native")
    ax.set_title("What the container costs")
    save(fig, out)


def plot_allreduce(rows: list[Row], out: Path) -> None:
    """Allreduce bus bandwidth against message size (log-log), per runtime and layout, with raw TCP's as a line."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sweeps: dict[tuple[str, str, int, int], list[Row]] = {}
    for row in sorted((r for r in rows if r.metric == "bus_bandwidth_bytes_per_second"), key=lambda r: r.size_bytes):
        sweeps.setdefault((row.kind, row.runtime, row.ranks, row.nodes), []).append(row)
    for (kind, runtime, ranks, nodes), points in sweeps.items():
        line = ax.errorbar([p.size_bytes for p in points], [p.mean / 1e6 for p in points],
                           yerr=[p.ci95 / 1e6 for p in points], marker="o", capsize=3,
                           linestyle="-" if runtime == "udocker" else "--",
                           label=f"{kind}, {runtime}, {ranks} ranks / {nodes} node(s)")
        tcp = [r for r in rows if r.metric == "tcp_bytes_per_second" and (r.kind, r.runtime, r.ranks, r.nodes) ==
               (kind, runtime, ranks, nodes)]
        if tcp:
            ax.axhline(tcp[0].mean / 1e6, color=line[0].get_color(), linestyle=":", linewidth=1,
                       label=f"raw TCP, {runtime}, {ranks} ranks / {nodes} node(s)")
    if sweeps:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no allreduce measured", ha="center", transform=ax.transAxes)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (MB/s)")
    ax.set_title("Horovod allreduce")
    ax.grid(alpha=0.3, which="both")
    save(fig, out)


def plot_frameworks(rows: list[Row], out: Path) -> None:
    """The frameworks side by side: samples/s after warm-up of each model, per rank count, node count and runtime,
    one bar per framework (TensorFlow/Keras + Horovod, PyTorch + Horovod, PyTorch DDP), mean ± 1.96σ."""
    groups: dict[tuple[str, int, int, str], dict[str, Row]] = {}
    for row in rows:
        if row.metric == "samples_per_second":
            framework, model = framework_of(row.kind)
            groups.setdefault((model, row.ranks, row.nodes, row.runtime), {})[framework] = row
    compared = {key: bars for key, bars in sorted(groups.items()) if len(bars) > 1}
    frameworks = [f for f in FRAMEWORKS if any(f in bars for bars in compared.values())]
    fig, ax = plt.subplots(figsize=(max(6, len(compared) * 1.6), 4.5))
    if compared:
        width = 0.8 / len(frameworks)
        for i, framework in enumerate(frameworks):
            xs = [x + (i - (len(frameworks) - 1) / 2) * width for x, bars in enumerate(compared.values()) if framework in bars]
            points = [bars[framework] for bars in compared.values() if framework in bars]
            ax.bar(xs, [p.mean for p in points], width=width, yerr=[p.ci95 for p in points], capsize=3, label=framework)
        ax.set_xticks(list(range(len(compared))))
        ax.set_xticklabels([f"{model}\n{ranks}r/{nodes}n {runtime}" for model, ranks, nodes, runtime in compared],
                           fontsize=8)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "one framework measured (benchmark.frameworks)", ha="center", transform=ax.transAxes)
    ax.set_ylabel("samples/s (after warm-up)")
    ax.set_title("Frameworks on the same models and data")
    ax.grid(alpha=0.3, axis="y")
    save(fig, out)
