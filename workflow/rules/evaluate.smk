rule evaluate:
    input:
        model="results/{experiment}/model",
        index=lambda wildcards: f"resources/datasets/{experiment(wildcards)['dataset']}/index.json",
        image=lambda wildcards: get_image_record(experiment(wildcards)["image"]),
    output:
        evaluation=report(
            "results/{experiment}/evaluation.json",
            caption="../report/evaluation.rst",
            category="{experiment}",
        ),
    log:
        "logs/evaluate/{experiment}.log",
    params:
        spec=experiment,
    run:
        steps.evaluate_rule(input, output, log, params, config, PROFILE)
