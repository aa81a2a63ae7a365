rule plot_learning_curves:
    input:
        history="results/{experiment}/history.csv",
    output:
        plot=report(
            "results/{experiment}/plots/learning_curves.png",
            caption="../report/learning_curves.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_learning_curves/{experiment}.log",
    localrule: True
    run:
        steps.learning_curves_rule(wildcards, input, output, log)


rule plot_membership:
    input:
        record="results/{experiment}/run.json",
    output:
        plot=report(
            "results/{experiment}/plots/membership.png",
            caption="../report/membership.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_membership/{experiment}.log",
    localrule: True
    run:
        steps.membership_rule(wildcards, input, output, log)


rule plot_allocation:
    input:
        record="results/{experiment}/run.json",
    output:
        plot=report(
            "results/{experiment}/plots/allocation.png",
            caption="../report/allocation.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_allocation/{experiment}.log",
    localrule: True
    run:
        steps.allocation_rule(wildcards, input, output, log)


rule plot_confusion_matrix:
    input:
        evaluation="results/{experiment}/evaluation.json",
    output:
        plot=report(
            "results/{experiment}/plots/confusion_matrix.png",
            caption="../report/confusion_matrix.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_confusion_matrix/{experiment}.log",
    localrule: True
    run:
        steps.confusion_matrix_rule(wildcards, input, output, log)


rule plot_per_class:
    input:
        evaluation="results/{experiment}/evaluation.json",
    output:
        plot=report(
            "results/{experiment}/plots/per_class.png",
            caption="../report/per_class.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_per_class/{experiment}.log",
    localrule: True
    run:
        steps.per_class_rule(wildcards, input, output, log)


rule record_page:
    input:
        record="results/{experiment}/run.json",
    output:
        page=report(
            "results/{experiment}/run-record.html",
            caption="../report/run_record.rst",
            category="{experiment}",
        ),
    log:
        "logs/record_page/{experiment}.log",
    localrule: True
    run:
        steps.record_page_rule(input, output, log)
