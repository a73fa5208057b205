"""TunePlane runner: the entry point of every capsule (`python .tuneplane/runner.pex`).

Reads the authoritative JobSpec that sits next to it, sets up the job's environment and runs the
entrypoint through bash in the capsule root. SIGTERM and SIGINT are forwarded to the entrypoint's
process group, and the runner exits with the entrypoint's status (128 + signal if it was killed).
Standard library only: it must work with whatever Python the job's image has.
"""

import json
import os
import signal
import subprocess
import sys


def capsule_root():
    # argv[0] is .../.tuneplane/runner.pex; the capsule root is two levels up.
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    return os.path.dirname(here)


def log(message):
    sys.stderr.write("[tuneplane-runner] %s\n" % message)
    sys.stderr.flush()


def main():
    root = capsule_root()
    spec_path = os.path.join(root, ".tuneplane", "jobspec.json")
    try:
        with open(spec_path, "rb") as f:
            spec = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        log("cannot read %s: %s" % (spec_path, e))
        return 2
    entrypoint = spec.get("entrypoint")
    if not isinstance(entrypoint, str) or not entrypoint.strip():
        log("the job spec has no entrypoint")
        return 2

    env = dict(os.environ)
    for key, value in sorted((spec.get("env") or {}).items()):
        env[str(key)] = str(value)
    env.setdefault("TUNEPLANE_JOB_ID", "local")
    env["TUNEPLANE_JOB_NAME"] = str(spec.get("name", ""))
    env["TUNEPLANE_CAPSULE_ROOT"] = root
    # User modules beside the entrypoint import from anywhere, as they do under Ray's working_dir.
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")

    log("job %s: running %r in %s" % (env["TUNEPLANE_JOB_ID"], entrypoint, root))
    try:
        child = subprocess.Popen(["bash", "-c", entrypoint], cwd=root, env=env, start_new_session=True)
    except OSError as e:
        log("cannot start bash: %s" % e)
        return 127

    def forward(signum, _frame):
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = child.wait()
    code = 128 - status if status < 0 else status
    log("job %s: entrypoint exited with status %d" % (env["TUNEPLANE_JOB_ID"], code))
    return code


if __name__ == "__main__":
    sys.exit(main())
