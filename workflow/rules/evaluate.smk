rule evaluate:
    input:
        model="results/{experiment}/model.keras",
        index=lambda wildcards: f"resources/datasets/{experiment(wildcards)['dataset']}/index.json",
        image=lambda wildcards: get_image_record(experiment(wildcards)["image"]),
    output:
        report(
            "results/{experiment}/evaluation.json",
            caption="../report/evaluation.rst",
            category="{experiment}",
        ),
    log:
        "logs/evaluate/{experiment}.log",
    run:
        from hvdflow.steps import evaluate_step

        evaluate_step(PROFILE, Path(config["catalog"]), Path(input.image), Path(input.model), Path(input.index), Path(output[0]), Path(log[0]))
