"""TunePlane runner: the entry point of every capsule (`python .tuneplane/runner.pex`).

Checks every file of the capsule against `.tuneplane/manifest.json` (size and SHA-256) and refuses
to run anything when one differs or is missing (exit status 86, like the capsule fetch), then reads
the authoritative JobSpec that sits next to it, sets up the job's environment and runs the
entrypoint through bash in the capsule root. SIGTERM and SIGINT are forwarded to the entrypoint's
process group, and the runner exits with the entrypoint's status (128 + signal if it was killed).

Outputs and checkpoints (docs/design.md section 4), when the pod has a grant (`TUNEPLANE_API_URL`
and `TUNEPLANE_GRANT`):
- `TUNEPLANE_OUTPUT_DIR`: what the entrypoint leaves there is uploaded when it ends (also after a
  SIGTERM) to the job's outputs.
- `TUNEPLANE_CHECKPOINT_DIR`: each subfolder is a checkpoint, complete once the entrypoint writes an
  empty `.complete` file in it. Complete checkpoints are uploaded as they appear (a folder without
  the marker never is), then the API records them and keeps the newest few.
- On attempt 2 and later (`TUNEPLANE_ATTEMPT`), the newest complete checkpoint is downloaded before
  the entrypoint starts and `TUNEPLANE_RESUME_FROM` names its folder.
- A job with `depends_on` gets the outputs of the jobs it depends on in `TUNEPLANE_INPUTS_DIR`, one
  folder per dependency (its name), downloaded before the entrypoint starts.
Uploads go through URLs the API signs for this job's own folders only, each for the file's exact
size (the store refuses a body of another length; the API refuses a file above its per-object
limit or past the tenant's storage quota, and such a refusal is not retried); the pod holds no
cloud credentials. Standard library only: it must work with whatever Python the job's image has.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


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


# Exit status when attempt N+1 cannot fetch the checkpoint it must resume from, or a job the
# outputs of the jobs it depends on.
RESUME_FAILED_EXIT = 87
# Seconds between looks for new complete checkpoints.
SCAN_SECONDS = 1.0
# Marker of a complete checkpoint folder.
COMPLETE = ".complete"


class Refused(RuntimeError):
    """The API answered a 4xx other than 429, with its status in `code`."""

    def __init__(self, code, message):
        RuntimeError.__init__(self, message)
        self.code = code


# Answers that asking again does not change: a bad request (a file above the per-object limit)
# and a conflict (the tenant's storage quota).
FINAL = (400, 409, 413)


class Api:
    """The API's grant routes for this job's attempt (no proxies; loopback and the pod network)."""

    def __init__(self, base, grant, job_id):
        self.base = base.rstrip("/")
        self.grant = grant
        self.job = urllib.parse.quote(job_id, safe="")
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        last = None
        for attempt in range(4):
            request = urllib.request.Request(
                "%s/v1/jobs/%s/grant/%s" % (self.base, self.job, path), data=data, method=method
            )
            request.add_header("Authorization", "Bearer " + self.grant)
            if data is not None:
                request.add_header("Content-Type", "application/json")
            try:
                with self.opener.open(request, timeout=60) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                text = e.read().decode("utf-8", "replace")[:500]
                if e.code == 404 and method == "GET":
                    return None
                if e.code < 500 and e.code != 429:
                    raise Refused(e.code, "%s %s: %d %s" % (method, path, e.code, text))
                last = "%d %s" % (e.code, text)
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.5 * 2 ** attempt)
        raise RuntimeError("%s %s failed: %s" % (method, path, last))

    def send(self, method, url, headers, path=None, into=None):
        """PUTs the file at `path` to `url`, or GETs `url` into the file `into`."""
        last = None
        for attempt in range(4):
            try:
                if method == "PUT":
                    size = os.path.getsize(path)
                    with open(path, "rb") as body:
                        request = urllib.request.Request(url, data=body, method="PUT")
                        for name, value in headers:
                            request.add_header(name, value)
                        request.add_header("Content-Length", str(size))
                        with self.opener.open(request, timeout=300) as response:
                            response.read()
                else:
                    with self.opener.open(urllib.request.Request(url), timeout=300) as response:
                        with open(into, "wb") as out:
                            shutil.copyfileobj(response, out, 1 << 20)
                return
            except (OSError, urllib.error.HTTPError) as e:
                last = str(e)
            time.sleep(0.5 * 2 ** attempt)
        raise RuntimeError("%s %s: %s" % (method, url.split("?")[0], last))

    def upload(self, pairs):
        """Uploads `(local file, job path)` pairs, a hundred per signing round, each URL signed
        for the file's size."""
        for i in range(0, len(pairs), 100):
            batch = pairs[i : i + 100]
            paths = [{"path": p, "size": os.path.getsize(local)} for local, p in batch]
            signed = self.call("POST", "presign", {"method": "PUT", "paths": paths})
            for (local, _), entry in zip(batch, signed["urls"]):
                self.send("PUT", entry["url"], [tuple(h) for h in entry.get("headers") or []], path=local)


def files_under(folder):
    """Regular files under `folder` as (absolute path, relative '/'-path), sorted; links skipped."""
    found = []
    for parent, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(parent, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            found.append((path, os.path.relpath(path, folder).replace(os.sep, "/")))
    return found


class Checkpoints:
    """Uploads complete checkpoint folders as they appear, each once, never a partial one."""

    def __init__(self, api, folder):
        self.api = api
        self.folder = folder
        self.done = set()
        self.lock = threading.Lock()

    def scan(self):
        with self.lock:
            try:
                names = sorted(os.listdir(self.folder))
            except OSError:
                return
            for name in names:
                if name in self.done or not os.path.isfile(os.path.join(self.folder, name, COMPLETE)):
                    continue
                files = [
                    (path, "checkpoints/%s/%s" % (name, rel))
                    for path, rel in files_under(os.path.join(self.folder, name))
                    if rel != COMPLETE
                ]
                if not files:
                    log("checkpoint %s has no files besides %s; skipped" % (name, COMPLETE))
                    self.done.add(name)
                    continue
                try:
                    self.api.upload(files)
                    answer = self.api.call("POST", "checkpoints/%s/complete" % urllib.parse.quote(name, safe=""), {})
                except Refused as e:
                    if e.code not in FINAL:
                        log("checkpoint %s not uploaded yet: %s" % (name, e))
                        return
                    # Too large or over the storage quota: asking every second changes nothing.
                    log("checkpoint %s not uploaded: %s" % (name, e))
                    self.done.add(name)
                    continue
                except RuntimeError as e:
                    log("checkpoint %s not uploaded yet: %s" % (name, e))
                    return
                self.done.add(name)
                size = sum(os.path.getsize(p) for p, _ in files)
                gone = answer.get("deleted") or []
                log(
                    "checkpoint %s uploaded (%d files, %d bytes)%s"
                    % (name, len(files), size, "; older ones deleted: " + ", ".join(gone) if gone else "")
                )

    def watch(self, stop):
        while not stop.wait(SCAN_SECONDS):
            self.scan()


def resume(api, base):
    """Downloads the newest complete checkpoint into `base`; its folder, or None if there is none."""
    latest = api.call("GET", "checkpoints/latest")
    if latest is None:
        return None
    target = os.path.join(base, latest["name"])
    shutil.rmtree(target, ignore_errors=True)
    for entry in latest["files"]:
        local = os.path.join(target, *entry["path"].split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        api.send("GET", entry["url"], [], into=local)
        if os.path.getsize(local) != entry["size"]:
            raise RuntimeError("%s: got %d bytes, the checkpoint has %d" % (entry["path"], os.path.getsize(local), entry["size"]))
    open(os.path.join(target, COMPLETE), "wb").close()
    log("resuming from checkpoint %s (written by attempt %s, %d files)" % (latest["name"], latest["attempt"], len(latest["files"])))
    return target


def fetch_inputs(api, base):
    """Downloads the outputs of the jobs this one depends on into `base/<name>/`."""
    answer = api.call("GET", "inputs") or {}
    count = size = 0
    for dep in answer.get("inputs") or []:
        name = dep["name"]
        if not name or "/" in name or name in (".", ".."):
            raise RuntimeError("the API named a dependency %r" % name)
        target = os.path.join(base, name)
        os.makedirs(target, exist_ok=True)
        for entry in dep["files"]:
            parts = entry["path"].split("/")
            if any(p in ("", ".", "..") for p in parts):
                raise RuntimeError("the API named an input %r" % entry["path"])
            local = os.path.join(target, *parts)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            api.send("GET", entry["url"], [], into=local)
            if os.path.getsize(local) != entry["size"]:
                raise RuntimeError("%s/%s: got %d bytes, the output has %d" % (name, entry["path"], os.path.getsize(local), entry["size"]))
            count += 1
            size += entry["size"]
        log("inputs: %d files of %s (%s, %s)" % (len(dep["files"]), name, dep.get("job_id"), dep.get("state")))
    return count, size


def io_base(root):
    """A writable folder beside the capsule for outputs, checkpoints and the resumed checkpoint."""
    base = os.path.join(os.path.dirname(root), "tuneplane-io")
    try:
        os.makedirs(base, exist_ok=True)
        return base
    except OSError:
        import tempfile

        return tempfile.mkdtemp(prefix="tuneplane-io-")


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
    env.setdefault("TUNEPLANE_ATTEMPT", "1")
    env["TUNEPLANE_JOB_NAME"] = str(spec.get("name", ""))
    env["TUNEPLANE_CAPSULE_ROOT"] = root
    # User modules beside the entrypoint import from anywhere, as they do under Ray's working_dir.
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    job_id, attempt = env["TUNEPLANE_JOB_ID"], env["TUNEPLANE_ATTEMPT"]

    base = io_base(root)
    outputs = os.path.join(base, "outputs")
    checkpoints = os.path.join(base, "checkpoints")
    for folder in (outputs, checkpoints):
        os.makedirs(folder, exist_ok=True)
    env["TUNEPLANE_OUTPUT_DIR"] = outputs
    env["TUNEPLANE_CHECKPOINT_DIR"] = checkpoints
    env.pop("TUNEPLANE_RESUME_FROM", None)
    # The grant is the runner's, not the entrypoint's.
    grant = env.pop("TUNEPLANE_GRANT", "")
    api = Api(env["TUNEPLANE_API_URL"], grant, job_id) if grant and env.get("TUNEPLANE_API_URL") else None
    if api is None:
        log("no grant for this pod: outputs and checkpoints stay local")
    elif attempt != "1":
        try:
            found = resume(api, os.path.join(base, "resume"))
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            log("attempt %s cannot fetch the checkpoint to resume from: %s" % (attempt, e))
            return RESUME_FAILED_EXIT
        if found is None:
            log("attempt %s: no complete checkpoint to resume from; starting from the beginning" % attempt)
        else:
            env["TUNEPLANE_RESUME_FROM"] = found

    if spec.get("depends_on"):
        inputs = os.path.join(base, "inputs")
        shutil.rmtree(inputs, ignore_errors=True)
        os.makedirs(inputs, exist_ok=True)
        env["TUNEPLANE_INPUTS_DIR"] = inputs
        if api is not None:
            try:
                count, size = fetch_inputs(api, inputs)
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                log("cannot fetch the outputs of the jobs this one depends on: %s" % e)
                return RESUME_FAILED_EXIT
            log("inputs downloaded (%d files, %d bytes) into %s" % (count, size, inputs))

    log("job %s attempt %s: running %r in %s" % (job_id, attempt, entrypoint, root))
    try:
        child = subprocess.Popen(["bash", "-c", entrypoint], cwd=root, env=env, start_new_session=True)
    except OSError as e:
        log("cannot start bash: %s" % e)
        return 127

    def forward(signum, _frame):
        if signum == signal.SIGTERM:
            log("SIGTERM: the entrypoint has %ss to save; complete checkpoints and outputs are uploaded when it ends"
                % ((spec.get("deadlines") or {}).get("grace_seconds", "its grace")))
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    stop = threading.Event()
    uploader = None
    if api is not None:
        uploader = Checkpoints(api, checkpoints)
        threading.Thread(target=uploader.watch, args=(stop,), daemon=True).start()
    status = child.wait()
    code = 128 - status if status < 0 else status
    log("job %s: entrypoint exited with status %d" % (job_id, code))
    stop.set()
    if api is not None:
        uploader.scan()
        files = [(path, "outputs/" + rel) for path, rel in files_under(outputs)]
        if files:
            try:
                api.upload(files)
                log("outputs uploaded (%d files, %d bytes)" % (len(files), sum(os.path.getsize(p) for p, _ in files)))
            except RuntimeError as e:
                log("outputs not uploaded: %s" % e)
    return code


if __name__ == "__main__":
    sys.exit(main())
