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
        steps.train_rule(wildcards, input, output, log, params, config, PROFILE)
