rule train:
    input:
        unpack(get_train_inputs),
    output:
        model="results/{experiment}/model.keras",
        metrics="results/{experiment}/metrics.json",
        history="results/{experiment}/history.csv",
        record="results/{experiment}/run.json",
        tensorboard=directory("results/{experiment}/tensorboard"),
    log:
        "logs/train/{experiment}.log",
    benchmark:
        "benchmarks/train/{experiment}.tsv"
    params:
        spec=experiment,
        launcher=PROFILE.launcher,
        runtime=PROFILE.runtime,
    run:
        from hvdflow.steps import train_step

        train_step(wildcards.experiment, params.spec, config, PROFILE, Path(input.image), Path(input.index), Path(output.record), Path(log[0]))
