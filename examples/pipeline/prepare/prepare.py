"""Step 1: writes the data set to the job's outputs."""
import os

path = os.path.join(os.environ["TUNEPLANE_OUTPUT_DIR"], "data.txt")
with open(path, "w") as f:
    f.write("\n".join(str(x) for x in range(1, 11)) + "\n")
print("prepare: wrote 10 rows to data.txt", flush=True)
