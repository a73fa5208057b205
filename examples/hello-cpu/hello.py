"""The smallest TunePlane job: prints who and where it is, then a short countdown."""

import os
import platform
import sys

from greeting import greet

print(greet(os.environ.get("GREETING", "hello")))
print("job id:", os.environ.get("TUNEPLANE_JOB_ID"))
print("python:", platform.python_version(), "on", sys.platform)
for i in range(3, 0, -1):
    print("countdown", i)
print("done")
