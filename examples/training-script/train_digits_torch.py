"""A plain PyTorch training loop written against hvdflow's script API (``hvdflow_trainer.script``).

In the config::

    experiments:
      loop:
        dataset: digits
        image: hvdflow-torch-cpu
        framework: pytorch
        distributed: horovod    # or ddp: run.track wraps the model in DistributedDataParallel instead
        ranks: 2
        model: {code: examples/training-script, script: train_digits_torch.py, params: {hidden: 32}}
        epochs: 5
        batch_size: 32          # per rank: run.batch_size
        learning_rate: 0.01     # scaled by the ranks: run.learning_rate

hvdflow runs it once per rank, in the image. What it gives the script (the ranks' group, the rank's data in the
epoch-keyed order on its device, checkpoints and resume, the agreed stop, the outputs) is in ``run``; the loop is
the script's own.
"""

import torch
from torch import nn

from hvdflow_trainer.script import start

run = start()
hidden = int(run.params.get("hidden", 32))
features = 1
for size in run.input_shape:
    features *= size
model = nn.Sequential(nn.Flatten(), nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, run.num_classes))
optimizer = torch.optim.SGD(model.parameters(), lr=run.learning_rate, momentum=0.9)
# restores the newest checkpoint of this run, if there is one; returns what to train with (gradients averaged)
net, optimizer = run.track(model, optimizer)

for epoch in run.epochs_to_run():
    loss_sum, right, seen = 0.0, 0, 0
    for x, y in run.train_batches(epoch):
        optimizer.zero_grad()
        logits = net(x)
        loss = run.loss(logits, y)
        loss.backward()
        optimizer.step()
        loss_sum += float(loss) * len(y)
        right += int((logits.argmax(dim=1) == y).sum())
        seen += len(y)
        if run.should_stop():   # the scheduler's warning or Ctrl-C on any rank: all ranks stop here together
            run.stop()          # a checkpoint, then the rank ends to be resumed by the next attempt
    run.end_epoch({"loss": loss_sum / seen, "accuracy": right / seen, **run.validate(net)})
run.finish()
