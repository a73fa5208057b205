"""moto_server with one request at a time (used by scripts/with-moto.sh).

moto's threaded server runs each request on its own thread with no lock around its backends, so
concurrent TransactWriteItems calls can all pass their conditions (50 identical idempotent
submissions created 3 jobs). Real DynamoDB isolates transactions; serialising moto's backend calls
gives the tests that isolation. Connections are still accepted concurrently.

    python scripts/moto-serial.py HOST PORT
"""

import sys
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

LOCK = threading.Lock()
APP = DomainDispatcherApplication(create_backend_app)


def serial(environ, start_response):
    # The whole body is produced under the lock: moto may build it lazily.
    with LOCK:
        return [b"".join(APP(environ, start_response))]


if __name__ == "__main__":
    host, port = sys.argv[1], int(sys.argv[2])
    run_simple(host, port, serial, threaded=True)
