rule list_dataset:
    input:
        image=get_dataset_image_record,
        sources=get_dataset_sources,
    output:
        manifest=directory("resources/datasets/{dataset}/manifest"),
    log:
        "logs/list_dataset/{dataset}.log",
    benchmark:
        "logs/benchmarks/list_dataset/{dataset}.tsv"
    params:
        spec=lambda wildcards: config["datasets"][wildcards.dataset],
    run:
        steps.list_rule(wildcards, input, output, log, params, config, PROFILE)


rule prepare_chunk:
    input:
        image=get_dataset_image_record,
        manifest="resources/datasets/{dataset}/manifest",
    output:
        chunk=directory("resources/datasets/{dataset}/chunk-{chunk}"),
    log:
        "logs/prepare_chunk/{dataset}-{chunk}.log",
    benchmark:
        "logs/benchmarks/prepare_chunk/{dataset}-{chunk}.tsv"
    params:
        spec=lambda wildcards: config["datasets"][wildcards.dataset],
    run:
        steps.chunk_rule(wildcards, input, output, log, config, PROFILE)


rule prepare_dataset:
    input:
        manifest="resources/datasets/{dataset}/manifest",
        chunks=get_dataset_chunks,
    output:
        index="resources/datasets/{dataset}/index.json",
    log:
        "logs/prepare_dataset/{dataset}.log",
    localrule: True
    run:
        steps.gather_rule(input, output, log)
