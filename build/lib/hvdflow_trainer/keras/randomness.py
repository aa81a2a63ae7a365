"""The random generators a Keras model owns, made part of a run's state.

Keras 2's random layers (``Dropout``, ``GaussianNoise``, ``GaussianDropout``, the augmentation layers, any subclass of
``BaseRandomLayer``) draw by default from TensorFlow's legacy stateful random ops, whose position lives inside the op's
kernel: no checkpoint can hold it, and a resumed run draws the masks of the run's first steps again.
:func:`use_resumable_generators`, called before a model is built, makes every such layer draw from a
``tf.random.Generator`` instead (Keras' own switch, ``enable_tf_random_generator``), seeded by the layer's seed or, when
it has none, from the run's seed; :func:`model_generators` finds them so that the run's checkpoints hold their state
(Keras leaves them out of ``model.weights`` and of a model's own checkpoint on purpose, for compatibility).

Random ops a model calls itself (``tf.random.uniform`` in a ``Lambda`` or a layer of the user's, ``tf.image.random_*``)
are still the legacy kind: :func:`unresumable_random_ops` names them, so that the model check can say which layers a
resume cannot continue exactly.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

LEGACY_RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "ParameterizedTruncatedNormal",
    "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "Multinomial", "RandomCrop",
})
"""TensorFlow's stateful random ops whose state is inside the kernel (the ``tf.random.Generator`` ops keep theirs in
a variable, the stateless ones have none)."""


def use_resumable_generators() -> None:
    """Random layers built after this call draw from a ``tf.random.Generator`` (a variable the run checkpoints)."""
    import tensorflow as tf

    tf.keras.backend.experimental.enable_tf_random_generator()


def model_generators(model) -> Dict[str, object]:  # type: ignore[no-untyped-def]
    """The ``tf.random.Generator`` of every random layer of ``model`` (nested models included), by the layer's path
    in the model (``model/block/dropout``); empty for a model without random layers."""
    found: Dict[str, object] = {}

    def visit(layer, path: str) -> None:  # type: ignore[no-untyped-def]
        random = getattr(layer, "_random_generator", None)
        generator = getattr(random, "_generator", None)
        if generator is not None:
            found[path] = generator
        for child in getattr(layer, "layers", []) or []:
            visit(child, "%s/%s" % (path, child.name))

    for layer in model.layers:
        visit(layer, layer.name)
    return found


def unresumable_random_ops(model, input_shape: Sequence[int]) -> List[str]:  # type: ignore[no-untyped-def]
    """The legacy stateful random ops (:data:`LEGACY_RANDOM_OPS`) of a training-mode call of ``model``, each as
    ``op name (op type)``; their position cannot be checkpointed."""
    import tensorflow as tf

    traced = tf.function(lambda x: model(x, training=True))
    graph = traced.get_concrete_function(tf.TensorSpec([None, *input_shape], tf.float32)).graph.as_graph_def()
    nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
    return sorted({"%s (%s)" % (node.name, node.op) for node in nodes if node.op in LEGACY_RANDOM_OPS})
