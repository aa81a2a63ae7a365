rule check_model:
    # a user's own model built once in the image on the dataset's shape: bad code is named on the login node in
    # seconds, before a training job queues
    input:
        image=lambda wildcards: get_image_record(experiment(wildcards)["image"]),
        index=lambda wildcards: f"resources/datasets/{experiment(wildcards)['dataset']}/index.json",
    output:
        check="results/{experiment}/model-check.json",
    log:
        "logs/check_model/{experiment}.log",
    localrule: True
    params:
        spec=experiment,
        name=lambda wildcards: wildcards.experiment,
    run:
        steps.check_model_rule(input, output, log, params, config, PROFILE)


rule train:
    input:
        unpack(get_train_inputs),
    output:
        model=directory("results/{experiment}/model"),  # model.keras (TensorFlow) or model.pt (PyTorch) in it
        metrics="results/{experiment}/metrics.json",
        history="results/{experiment}/history.csv",
        record="results/{experiment}/run.json",
        tensorboard=directory("results/{experiment}/tensorboard"),
    log:
        "logs/train/{experiment}.log",
    benchmark:
        "logs/benchmarks/train/{experiment}.tsv"
    resources:
        # one Slurm job over the experiment's nodes, one task per rank; the rule's body starts the job steps.
        # runtime (minutes) and mem_mb (per node) are defaults: a profile's set-resources gives its cluster's.
        runtime=60,
        mem_mb=4000,
        nodes=lambda wildcards: experiment(wildcards)["nodes"],
        tasks=lambda wildcards: train_tasks(wildcards)["tasks"],
        tasks_per_node=lambda wildcards: train_tasks(wildcards)["tasks_per_node"],
        tasks_per_gpu=lambda wildcards: train_tasks(wildcards)["tasks_per_gpu"],
        mpi=lambda wildcards: train_tasks(wildcards)["mpi"],
        slurm_extra=lambda wildcards: train_tasks(wildcards)["slurm_extra"],
        gres=train_gres,
    params:
        spec=experiment,
        launcher=PROFILE.launcher,
        runtime=PROFILE.runtime.kind,
    run:
        steps.train_rule(wildcards, input, output, log, params, config, PROFILE)
