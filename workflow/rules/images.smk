rule pull_image:
    input:
        catalog=config["catalog"],
    output:
        record="resources/images/{image}.json",
        check="resources/images/{image}.check.json",
    log:
        "logs/pull_image/{image}.log",
    localrule: True
    params:
        # not the registry URL: the digest pinned in the lock file decides what is pulled, wherever from
        udocker_dir=str(PROFILE.runtime.udocker_dir),
        execmode=PROFILE.runtime.execmode,
        needs=lambda wildcards: image_needs(wildcards.image),  # what `hvdflow image check` judges it against
    run:
        steps.pull_rule(wildcards, input, output, log, params, config, PROFILE)
