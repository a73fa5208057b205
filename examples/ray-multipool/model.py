"""A sibling module imported by train.py (from the capsule root, also inside Ray tasks)."""


def train_step(epoch):
    return 1.0 / (epoch + 1)


def evaluate(loss):
    return 1.0 - loss / 2
