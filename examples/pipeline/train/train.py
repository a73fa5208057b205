"""Step 2: reads prepare's data.txt from its inputs, "trains" (a mean) and writes the model."""
import os

data = os.path.join(os.environ["TUNEPLANE_INPUTS_DIR"], "prepare", "data.txt")
rows = [float(line) for line in open(data) if line.strip()]
mean = sum(rows) / len(rows)
with open(os.path.join(os.environ["TUNEPLANE_OUTPUT_DIR"], "model.txt"), "w") as f:
    f.write("mean=%s\n" % mean)
print("train: %d rows, model mean=%s" % (len(rows), mean), flush=True)
