rule prepare_dataset:
    input:
        image=get_dataset_image_record,
    output:
        index="resources/datasets/{dataset}/index.json",
    log:
        "logs/prepare_dataset/{dataset}.log",
    benchmark:
        "benchmarks/prepare_dataset/{dataset}.tsv"
    params:
        spec=lambda wildcards: config["datasets"][wildcards.dataset],
    run:
        from hvdflow.steps import prepare_step

        prepare_step(params.spec, PROFILE, Path(config["catalog"]), Path(input.image), Path(output.index), Path(log[0]))
