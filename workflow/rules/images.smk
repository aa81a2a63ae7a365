rule pull_image:
    input:
        catalog=config["catalog"],
    output:
        record="resources/images/{image}.json",
    log:
        "logs/pull_image/{image}.log",
    params:
        registry=PROFILE.registry,
        udocker_dir=str(PROFILE.udocker_dir),
        execmode=PROFILE.execmode,
    localrule: True
    run:
        from hvdflow.steps import pull_step

        pull_step(wildcards.image, PROFILE, Path(input.catalog), Path(config["lock"]), Path(output.record), Path(log[0]))
