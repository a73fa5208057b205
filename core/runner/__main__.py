"""TunePlane runner: the entry point of every capsule (`python .tuneplane/runner.pex`).

Checks every file of the capsule against `.tuneplane/manifest.json` (size and SHA-256) and refuses
to run anything when one differs or is missing (exit status 86, like the capsule fetch), then reads
the authoritative JobSpec that sits next to it, sets up the job's environment and runs the
entrypoint through bash in the capsule root. SIGTERM and SIGINT are forwarded to the entrypoint's
process group, and the runner exits with the entrypoint's status (128 + signal if it was killed).
Standard library only: it must work with whatever Python the job's image has.
"""

import hashlib
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


# Exit status of a capsule that does not match its manifest (the fetch scripts' status too).
MISMATCH_EXIT = 86


def verify(root):
    """The first file of `root` that differs from the manifest, as a message; None when all match."""
    manifest_path = os.path.join(root, ".tuneplane", "manifest.json")
    try:
        with open(manifest_path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return "cannot read %s: %s" % (manifest_path, e)
    for entry in files:
        path = os.path.join(root, entry["path"])
        h, size = hashlib.sha256(), 0
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                    size += len(chunk)
        except OSError as e:
            return "%s: %s" % (entry["path"], e.strerror or e)
        if size != entry["size"] or h.hexdigest() != entry["sha256"]:
            return "%s: sha256 %s, the manifest says %s" % (entry["path"], h.hexdigest(), entry["sha256"])
    return None


def main():
    root = capsule_root()
    problem = verify(root)
    if problem is not None:
        log("capsule checksum mismatch: %s; nothing was executed" % problem)
        return MISMATCH_EXIT
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
