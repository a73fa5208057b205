"""TunePlane's gate in front of a job's Ray dashboard (a container of the head pod).

Ray runs with token authentication (RAY_AUTH_MODE=token, the job's own token from its Secret),
so its dashboard, GCS and client server answer only holders of the token. KubeRay v1.4 follows a
RayJob by asking the dashboard for the job's status through the API server's service proxy, and
can send no token (the proxy drops credentials anyway). So the head Service's `dashboard` port is
this gate, not Ray's:
- a request carrying credentials (an Authorization or X-Ray-Authorization header, Ray's cookie) is
  passed to Ray's dashboard, and Ray checks them (a wrong token is refused by Ray); it is marked
  `Connection: close`, so a client's next request on a kept-alive connection cannot skip the gate;
- the one request the operator makes without, GET /api/jobs/<this job's submission id>, is
  forwarded with the token and answered with the status fields only: status, ids, timestamps,
  error type and exit code. No entrypoint, runtime environment or metadata, and not Ray's
  `message`: on failure Ray puts the tail of the driver's log there, which only the token's
  holders may read. The one thing of it the reconciler needs, that the runner refused a capsule
  whose checksums do not match, is said in a fixed message of the gate's own. Ray's answer to
  anything but 200 is not passed on either;
- the stop of this job, POST /api/jobs/<this job's submission id>/stop, is forwarded with the token
  and answered with whether Ray stopped it, nothing else. The reconciler sends it (through the API
  server's pod proxy) before it deletes a stopped or preempted job's RayJob, and waits for the job
  to end: Ray's stop signals the driver and leaves it RAY_JOB_STOP_WAIT_TIME_S (the job's grace)
  to save and print before it kills it, and what it prints reaches the attempt's archive. The
  operator sends the same stop when a RayJob is deleted. Stopping is what deleting the RayJob does
  anyway, and only the operator and the API server's proxy reach the gate;
- anything else is refused with 401.
Only the Python standard library is used, so any image with Python 3 can run it.
"""

import http.client
import json
import os
import socket
import sys
import threading

TOKEN = os.environ["RAY_AUTH_TOKEN"]
SUBMISSION = os.environ["TUNEPLANE_GATE_SUBMISSION_ID"]
PORT = int(os.environ.get("TUNEPLANE_GATE_PORT", "8270"))
UPSTREAM = ("127.0.0.1", int(os.environ.get("TUNEPLANE_GATE_UPSTREAM_PORT", "8265")))
STATUS_FIELDS = (
    "type", "job_id", "submission_id", "status", "error_type",
    "start_time", "end_time", "driver_exit_code",
)
# The runner's refusal of a capsule (core/runner, MISMATCH_TEXT in core/src/render/bootstrap.rs) in
# Ray's message, and what the gate says instead: the reconciler fails the job as CapsuleMismatch.
MISMATCH_MARK = "[tuneplane-runner] capsule checksum mismatch"
MISMATCH_MESSAGE = (
    "[tuneplane-runner] capsule checksum mismatch: the runner refused the capsule; "
    "nothing was executed (the job's logs say which file)"
)
SCALARS = (str, int, float, bool, type(None))
CREDENTIALS = {"authorization", "x-ray-authorization"}
MAX_HEAD = 64 * 1024
SLOTS = threading.BoundedSemaphore(128)


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk or len(data) + len(chunk) > MAX_HEAD:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head, rest


def reply(conn, status, reason, body, ctype="text/plain; charset=utf-8"):
    head = (
        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        % (status, reason, ctype, len(body))
    )
    conn.sendall(head.encode("latin-1") + body)


def pipe(src, dst):
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def carries_credentials(lines):
    for line in lines:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in CREDENTIALS:
            return True
        if name == "cookie" and "ray-authentication-token=" in value:
            return True
    return False


def one_request(head):
    """The request head with `Connection: close`, so that Ray ends the connection after its
    answer and the client's next request comes through the gate again (a WebSocket upgrade,
    as `ray job logs --follow` makes, stays one connection: Ray judged its credentials)."""
    lines = head.split(b"\r\n")
    names = [line.split(b":", 1)[0].strip().lower() for line in lines[1:]]
    if b"upgrade" in names:
        return head
    kept = [lines[0]] + [
        line for line, name in zip(lines[1:], names) if name not in (b"connection", b"keep-alive")
    ]
    return b"\r\n".join(kept + [b"Connection: close"])


def passthrough(conn, head, rest):
    up = socket.create_connection(UPSTREAM, timeout=30)
    with up:
        up.settimeout(None)
        conn.settimeout(None)
        up.sendall(one_request(head) + b"\r\n\r\n" + rest)
        back = threading.Thread(target=pipe, args=(up, conn), daemon=True)
        back.start()
        pipe(conn, up)
        back.join()


def status_of(info):
    """The job's status fields from Ray's job info, with no text of the driver's log."""
    # Scalars only: a field that turns into an object or a list in a later Ray stays out.
    kept = {k: info[k] for k in STATUS_FIELDS if k in info and isinstance(info[k], SCALARS)}
    message = info.get("message")
    if isinstance(message, str) and MISMATCH_MARK in message:
        kept["message"] = MISMATCH_MESSAGE
    return kept


def job_status(conn):
    up = http.client.HTTPConnection(*UPSTREAM, timeout=30)
    try:
        up.request("GET", "/api/jobs/" + SUBMISSION, headers={"X-Ray-Authorization": "Bearer " + TOKEN})
        r = up.getresponse()
        body = r.read()
        if r.status == 200:
            body = json.dumps(status_of(json.loads(body))).encode()
            reply(conn, 200, "OK", body, "application/json")
        else:
            # Ray's own words about the failure stay inside; the operator needs the status.
            reply(conn, r.status, r.reason, b"the job's dashboard answered %d\n" % r.status)
    finally:
        up.close()


def stop_job(conn):
    """Ray's stop of this job, answered with `{"stopped": true|false}` only."""
    up = http.client.HTTPConnection(*UPSTREAM, timeout=30)
    try:
        up.request(
            "POST", "/api/jobs/" + SUBMISSION + "/stop",
            headers={"X-Ray-Authorization": "Bearer " + TOKEN, "Content-Length": "0"},
        )
        r = up.getresponse()
        body = r.read()
        if r.status == 200:
            stopped = json.loads(body).get("stopped") is True
            reply(conn, 200, "OK", json.dumps({"stopped": stopped}).encode(), "application/json")
        else:
            reply(conn, r.status, r.reason, b"the job's dashboard answered %d\n" % r.status)
    finally:
        up.close()


def handle(conn):
    with conn:
        try:
            conn.settimeout(30)
            head, rest = read_head(conn)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                reply(conn, 400, "Bad Request", b"malformed request line\n")
                return
            method, target = parts[0], parts[1]
            if carries_credentials(lines[1:]):
                passthrough(conn, head, rest)
                return
            path = target.split("?", 1)[0].rstrip("/")
            if method == "GET" and path == "/api/jobs/" + SUBMISSION:
                job_status(conn)
                return
            if method == "POST" and path == "/api/jobs/" + SUBMISSION + "/stop":
                stop_job(conn)
                return
            reply(
                conn, 401, "Unauthorized",
                b"this Ray cluster answers only its own job: send the job's token "
                b"(Authorization: Bearer <token>)\n",
            )
        except (OSError, ValueError) as e:
            sys.stderr.write("ray-auth-gate: %s\n" % e)
        finally:
            SLOTS.release()


def main():
    server = socket.create_server(("0.0.0.0", PORT), backlog=128)
    print("ray-auth-gate: listening on :%d for submission %s" % (PORT, SUBMISSION), flush=True)
    while True:
        conn, _ = server.accept()
        SLOTS.acquire()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
