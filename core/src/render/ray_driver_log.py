"""TunePlane's driver log follower (a container of a job's Ray head pod).

On a real cluster a Ray job's driver (TunePlane's runner, and the entrypoint under it) runs on the
head, and what it prints goes to Ray's job-driver log file under /tmp/ray, not to any container's
log. KubeRay's submitter streams it back (`ray job logs --follow`), but that stream runs a few
seconds behind and does not always catch the last lines of a job that ended (Ray issues 46413,
48701): exactly the lines a stopped or preempted job prints in its grace. So this container copies
the driver's log file, as it grows, to its own output, where the kubelet keeps it and TunePlane's
log archive reads it like any container's. /tmp/ray is an emptyDir shared with the head
container. On SIGTERM (the pod is deleted, after the reconciler let Ray stop the job) it copies
what is left and exits.
Only the Python standard library is used, so any image with Python 3 can run it.
"""

import glob
import os
import signal
import sys
import time

SUBMISSION = os.environ["TUNEPLANE_DRIVER_SUBMISSION_ID"]
PATTERN = "/tmp/ray/session_2*/logs/job-driver-%s.log" % SUBMISSION
POLL_SECONDS = 0.2
stopping = False


def on_sigterm(_signum, _frame):
    global stopping
    stopping = True


def newest(paths):
    """The log of the newest Ray session (a restarted head starts another)."""
    try:
        return max(paths, key=os.path.getmtime) if paths else None
    except OSError:
        return None


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    out = sys.stdout.buffer
    path, log = None, None
    while True:
        found = newest(glob.glob(PATTERN))
        if found is not None and found != path:
            if log is not None:
                log.close()
            path, log = found, open(found, "rb")
        chunk = log.read(65536) if log is not None else b""
        if chunk:
            out.write(chunk)
            out.flush()
            continue
        # Nothing left to copy: done once told to stop.
        if stopping:
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
