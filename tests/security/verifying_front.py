"""A small verifying front before moto: what real S3 checks and moto does not.

moto checks SigV4 signatures, but it does not check that the body matches the signed
`x-amz-content-sha256` or `Content-MD5`, and it accepts `x-amz-*` headers left out of the
signature. Real S3 refuses all three. Without this front, a test of remote signing would pass
whatever the signer signed. Every request (icegate's own, clients') goes through it:

- every `x-amz-*` header and `Content-MD5` present must be listed in the SigV4 `SignedHeaders`
  (403 AccessDenied otherwise);
- a hex `x-amz-content-sha256` must be the SHA-256 of the body (400 XAmzContentSHA256Mismatch);
- a `Content-MD5` must be the MD5 of the body (400 BadDigest);
Then the request is forwarded unchanged (its raw path too: like S3, the store reads the first
segment as the bucket, dot segments or not) to moto and its answer relayed. Refusals are counted
(GET /__front__/refusals) so a test can tell that the front, not moto, refused.
"""

import base64
import hashlib
import http.client
import http.server
import json
import re
import sys
import threading

REFUSALS: list[dict] = []
_LOCK = threading.Lock()


def _error(handler, status: int, code: str, message: str) -> None:
    with _LOCK:
        REFUSALS.append({"code": code, "method": handler.command, "path": handler.path})
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    data = body.encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/xml")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _read_body(handler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
        return b"".join(chunks)
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


class Front(http.server.BaseHTTPRequestHandler):
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _handle(self):
        if self.path == "/__front__/refusals":
            data = json.dumps(REFUSALS).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        body = _read_body(self)
        headers = {k.lower(): v for k, v in self.headers.items()}
        authorization = headers.get("authorization", "")
        match = re.search(r"SignedHeaders=([^,\s]+)", authorization)
        if match:
            signed = set(match.group(1).split(";"))
            for name in headers:
                if (name.startswith("x-amz-") or name == "content-md5") and name not in signed:
                    return _error(self, 403, "AccessDenied", f"There were headers present in the request which were not signed: {name}")
        claimed = headers.get("x-amz-content-sha256", "")
        if re.fullmatch(r"[0-9a-f]{64}", claimed) and hashlib.sha256(body).hexdigest() != claimed:
            return _error(self, 400, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
        md5 = headers.get("content-md5")
        if md5 is not None and base64.b64encode(hashlib.md5(body).digest()).decode() != md5.strip():
            return _error(self, 400, "BadDigest", "The Content-MD5 you specified did not match what we received.")
        forward = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "connection", "content-length")}
        forward["Content-Length"] = str(len(body))
        connection = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            connection.request(self.command, self.path, body=body, headers=forward)
            response = connection.getresponse()
            data = response.read()
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            connection.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def serve(port: int, upstream_port: int) -> http.server.ThreadingHTTPServer:
    Front.upstream = ("127.0.0.1", upstream_port)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Front)
    server.daemon_threads = True
    return server


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2])).serve_forever()
