"""A stand-in for the vLLM OpenAI-compatible server on the real test tier.

It takes vLLM's command-line arguments (--model, --port, --host, --tensor-parallel-size,
--api-key or VLLM_API_KEY, and ignores the rest), answers /health, /v1/models, /v1/completions and
/v1/chat/completions in the OpenAI shapes, and runs on CPU with no model: the completion text is
made from the prompt. With --api-key every /v1 route needs `Authorization: Bearer <key>`.
Standard library only.
"""

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-stand-in")
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="0.0.0.0")
    # Like vLLM: the key comes from --api-key or, failing that, the VLLM_API_KEY variable.
    p.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY") or None)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    args, _unknown = p.parse_known_args(argv)
    return args


def make_handler(args):
    created = int(time.time())

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % a))

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self):
            if not args.api_key or not self.path.startswith("/v1"):
                return True
            if self.headers.get("Authorization", "") == "Bearer " + args.api_key:
                return True
            self.reply(401, {"error": {"message": "invalid or missing API key", "type": "invalid_request_error"}})
            return False

        def do_GET(self):
            if self.path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif not self.authorised():
                return
            elif self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{
                    "id": args.model, "object": "model", "created": created, "owned_by": "vllm",
                    "max_model_len": 4096}]})
            else:
                self.reply(404, {"error": {"message": "not found: " + self.path}})

        def do_POST(self):
            if not self.authorised():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self.reply(400, {"error": {"message": "the body is not JSON"}})
                return
            if req.get("model") not in (None, args.model):
                self.reply(404, {"error": {"message": "model %r is not served here; try %r" % (req.get("model"), args.model)}})
                return
            if self.path == "/v1/chat/completions":
                prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []))
                text = "echo: " + prompt
                self.reply(200, {"id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                                 "model": args.model, "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                                 "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split()),
                                           "total_tokens": len(prompt.split()) + len(text.split())}})
            elif self.path == "/v1/completions":
                prompt = str(req.get("prompt", ""))
                self.reply(200, {"id": "cmpl-standin", "object": "text_completion", "created": int(time.time()),
                                 "model": args.model, "choices": [{"index": 0, "text": " echo: " + prompt,
                                 "finish_reason": "stop"}]})
            else:
                self.reply(404, {"error": {"message": "not found: " + self.path}})

    return Handler


def main():
    args = parse_args(sys.argv[1:])
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args))
    print("vllm stand-in serving %s on %s:%d (tensor parallel %d)" % (
        args.model, args.host, args.port, args.tensor_parallel_size), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
