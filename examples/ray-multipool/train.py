"""Trains on the main pool and evaluates on the eval pool.

With Ray available, work is placed on each pool through the custom resources TunePlane gives every
worker group ({"tuneplane.pool.main": 1}, {"tuneplane.pool.eval": 1}); each step reports the
address of the Ray node it ran on, so the log shows which machine of which pool did what. Without
Ray (the one-machine stand-in), the same steps run in-process so the example works everywhere.
"""

import os

from model import evaluate, train_step

EPOCHS = int(os.environ.get("EPOCHS", "1"))

try:
    import ray
except ImportError:
    ray = None


def main():
    print("job", os.environ.get("TUNEPLANE_JOB_ID"), "epochs", EPOCHS)
    if ray is not None:
        ray.init()

        def on_node(fn):
            # The step's result and the address of the Ray node that ran it.
            def run(*args):
                return fn(*args), ray.util.get_node_ip_address()

            return run

        step = ray.remote(resources={"tuneplane.pool.main": 1}, num_gpus=1)(on_node(train_step))
        ev = ray.remote(resources={"tuneplane.pool.eval": 1}, num_gpus=1)(on_node(evaluate))
        losses = []
        for e in range(EPOCHS):
            loss, where = ray.get(step.remote(e))
            print("pool main ran epoch %d on node %s" % (e, where))
            losses.append(loss)
        score, where = ray.get(ev.remote(losses[-1]))
        print("pool eval ran on node %s" % where)
    else:
        print("ray not installed: running the pools' steps in-process")
        losses = [train_step(e) for e in range(EPOCHS)]
        score = evaluate(losses[-1])
    for e, loss in enumerate(losses):
        print("epoch %d loss %.3f" % (e, loss))
    print("eval score %.3f" % score)
    print("sibling import ok:", train_step.__module__)


if __name__ == "__main__":
    main()
