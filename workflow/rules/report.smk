rule plot_learning_curves:
    input:
        history="results/{experiment}/history.csv",
    output:
        report(
            "results/{experiment}/plots/learning_curves.png",
            caption="../report/learning_curves.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_learning_curves/{experiment}.log",
    localrule: True
    run:
        from hvdflow.plots import plot_learning_curves

        plot_learning_curves(Path(input.history), Path(output[0]), wildcards.experiment)


rule plot_confusion_matrix:
    input:
        evaluation="results/{experiment}/evaluation.json",
    output:
        report(
            "results/{experiment}/plots/confusion_matrix.png",
            caption="../report/confusion_matrix.rst",
            category="{experiment}",
        ),
    log:
        "logs/plot_confusion_matrix/{experiment}.log",
    localrule: True
    run:
        from hvdflow.plots import plot_confusion_matrix

        plot_confusion_matrix(Path(input.evaluation), Path(output[0]), wildcards.experiment)
