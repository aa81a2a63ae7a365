rule pull_image:
    input:
        catalog=config["catalog"],
    output:
        record="resources/images/{image}.json",
    log:
        "logs/pull_image/{image}.log",
    localrule: True
    params:
        registry=PROFILE.registry,
        udocker_dir=str(PROFILE.udocker_dir),
        execmode=PROFILE.execmode,
    run:
        steps.pull_rule(wildcards, input, output, log, config, PROFILE)
