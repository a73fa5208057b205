"""One child of the sweep array: picks its learning rate by its index and "trains" briefly."""
import os
import time

index = int(os.environ["TUNEPLANE_ARRAY_INDEX"])
size = int(os.environ["TUNEPLANE_ARRAY_SIZE"])
rates = os.environ["LEARNING_RATES"].split()
rate = float(rates[index % len(rates)])
print(f"child {index} of {size}: learning rate {rate}", flush=True)
loss = 1.0
for step in range(3):
    time.sleep(1)
    loss *= 1.0 - rate
    print(f"child {index} step {step}: loss {loss:.4f}", flush=True)
print(f"child {index} done", flush=True)
