rule pull_image:
    input:
        catalog=config["catalog"],
    output:
        record="resources/images/{image}.json",
    log:
        "logs/pull_image/{image}.log",
    localrule: True
    params:
        # not the registry URL: the digest pinned in the lock file decides what is pulled, wherever from
        udocker_dir=str(PROFILE.udocker_dir),
        execmode=PROFILE.execmode,
    run:
        steps.pull_rule(wildcards, input, output, log, config, PROFILE)
