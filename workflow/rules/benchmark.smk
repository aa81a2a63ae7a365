# The benchmark (config `benchmark:`): `snakemake --profile profiles/<cluster> benchmark`. One job per measurement
# (a model's throughput, or the allreduce sweep with raw TCP, in one framework, for one rank and node count in one
# runtime, once per repetition), then the table, the goals and the figures in the report.


rule benchmark:
    input:
        table="results/benchmark/table.csv",
        plots=expand("results/benchmark/plots/{plot}.png", plot=BENCHMARK_PLOTS),
    localrule: True


rule benchmark_measure:
    input:
        image=lambda wildcards: get_image_record(
            benchmark_spec_or_error().image_of(wildcards.kind)
        ),
        previous_repetition=get_benchmark_previous_repetition,
    output:
        measurement="results/benchmark/measurements/{kind}-r{ranks}-n{nodes}-{runtime}-{rep}.json",
    log:
        "logs/benchmark_measure/{kind}-r{ranks}-n{nodes}-{runtime}-{rep}.log",
    wildcard_constraints:
        kind="|".join(BENCHMARK_KINDS),
        runtime="|".join(BENCHMARK_RUNTIMES),
        ranks=r"\d+",
        nodes=r"\d+",
        rep=r"\d+",
    # on one machine a measurement takes every core Snakemake has, so measurements never run side by side
    threads: 1 if PROFILE.slurm else workflow.cores
    resources:
        runtime=30,
        mem_mb=4000,
        nodes=lambda wildcards: int(wildcards.nodes),
        tasks=lambda wildcards: benchmark_tasks(wildcards)["tasks"],
        tasks_per_node=lambda wildcards: benchmark_tasks(wildcards)["tasks_per_node"],
        tasks_per_gpu=lambda wildcards: benchmark_tasks(wildcards)["tasks_per_gpu"],
        mpi=lambda wildcards: benchmark_tasks(wildcards)["mpi"],
        slurm_extra=lambda wildcards: benchmark_tasks(wildcards)["slurm_extra"],
        gres=lambda wildcards: gres(
            int(wildcards.ranks), int(wildcards.nodes), PROFILE.slurm
        ),
    run:
        steps.benchmark_measure_rule(
            wildcards,
            input,
            output,
            log,
            config,
            PROFILE,
            benchmark_spec_or_error(),
        )


rule benchmark_summary:
    input:
        measurements=lambda wildcards: get_benchmark_measurements(),
    output:
        table=report(
            "results/benchmark/table.csv",
            caption="../report/benchmark_table.rst",
            category="benchmark",
        ),
        summary="results/benchmark/summary.json",
    log:
        "logs/benchmark_summary.log",
    localrule: True
    run:
        steps.benchmark_summary_rule(input, output, log)


rule benchmark_plot:
    input:
        summary="results/benchmark/summary.json",
    output:
        plot=report(
            "results/benchmark/plots/{plot}.png",
            caption="../report/benchmark_plot.rst",
            category="benchmark",
        ),
    log:
        "logs/benchmark_plot/{plot}.log",
    wildcard_constraints:
        plot="|".join(BENCHMARK_PLOTS),
    localrule: True
    run:
        steps.benchmark_plot_rule(wildcards, input, output, log)
