"""A training loop that checkpoints every CHECKPOINT_SECONDS and resumes where it left off.

Multi-node jobs save the same way from one process only (rank 0 writes, as Ray Train and the
Hugging Face Trainer do): the runner uploads the driver's folders.
"""

import json
import os
import signal
import sys
import time

CHECKPOINTS = os.environ.get("TUNEPLANE_CHECKPOINT_DIR", "checkpoints")
OUTPUTS = os.environ.get("TUNEPLANE_OUTPUT_DIR", "outputs")
STEPS = int(os.environ.get("STEPS", "40"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.5"))
EVERY = float(os.environ.get("CHECKPOINT_SECONDS", "5"))

state = {"step": 0, "loss": 10.0}
resume = os.environ.get("TUNEPLANE_RESUME_FROM")
if resume:
    with open(os.path.join(resume, "state.json")) as f:
        state = json.load(f)
    print("attempt %s resumed from step %d (%s)" % (os.environ.get("TUNEPLANE_ATTEMPT"), state["step"], resume), flush=True)
else:
    print("attempt %s starts from step 0" % os.environ.get("TUNEPLANE_ATTEMPT", "1"), flush=True)


def save():
    folder = os.path.join(CHECKPOINTS, "step-%06d" % state["step"])
    if os.path.exists(os.path.join(folder, ".complete")):
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump(state, f)
    # Written last: only now is the checkpoint complete and uploaded.
    open(os.path.join(folder, ".complete"), "w").close()
    print("checkpoint at step %d" % state["step"], flush=True)


def on_sigterm(_signum, _frame):
    print("SIGTERM at step %d: saving and stopping" % state["step"], flush=True)
    save()
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
last = time.monotonic()
while state["step"] < STEPS:
    time.sleep(STEP_SECONDS)
    state["step"] += 1
    state["loss"] = round(state["loss"] * 0.95, 6)
    print("step %d loss %.4f" % (state["step"], state["loss"]), flush=True)
    if time.monotonic() - last >= EVERY:
        save()
        last = time.monotonic()

os.makedirs(OUTPUTS, exist_ok=True)
with open(os.path.join(OUTPUTS, "model.json"), "w") as f:
    json.dump(state, f)
print("done at step %d; model written to the outputs" % state["step"], flush=True)
