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
        steps.prepare_rule(input, output, log, params, config, PROFILE)
