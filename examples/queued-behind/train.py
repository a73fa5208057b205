import os

print("queued-behind ran after waiting for capacity; job", os.environ.get("TUNEPLANE_JOB_ID"))
